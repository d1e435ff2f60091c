//! What a node's server can do beyond the scripts: its own compare-and-set commands, read
//! from `INFO server` once per connection.

use std::fmt;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::backend::SendFailure;

use super::classify;
use super::connection::not_sent;

/// The compare-and-set commands a server has that leasehold uses in place of its script,
/// read from the server's `INFO server` (docs/design.md §4, "Native commands").
///
/// * `SET key value IFEQ value GET PX ttl` renews a lease that has no lock-delay: one
///   command, about half the script's cost to the server. Valkey 8.1 and later.
/// * `DELIFEQ key value` releases (with the release notice's `PUBLISH` beside it). Valkey
///   9.0 and later.
///
/// Redis 8.4 has the same compare-and-set (`SET … IFEQ`, `DELEX … IFEQ`); leasehold keeps
/// the script there until its suites run on that server. Acquisitions always run the
/// script: its fencing rule (`max(last + 1, server TIME)`) has no native form.
///
/// ```
/// use leasehold::ServerCapabilities;
/// let info = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
/// let valkey = ServerCapabilities::from_info(info);
/// assert!(valkey.renews_natively() && valkey.releases_natively());
/// let redis = ServerCapabilities::from_info("redis_version:7.0.15\r\n");
/// assert!(!redis.renews_natively());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerCapabilities {
    set_ifeq: bool,
    delifeq: bool,
}

impl ServerCapabilities {
    /// Nothing beyond the scripts: what a server that does not say what it is gets, and
    /// what [`RedisConfig::native_commands`](crate::RedisConfig::native_commands)`(false)`
    /// asks for.
    pub const SCRIPTS_ONLY: Self = Self {
        set_ifeq: false,
        delifeq: false,
    };

    /// The capabilities `INFO server`'s text (or `INFO everything`'s) shows.
    pub fn from_info(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let valkey = match (field("server_name"), field("valkey_version")) {
            (Some("valkey"), Some(version)) => version_of(version),
            _ => None,
        };
        match valkey {
            Some(version) => Self {
                set_ifeq: version >= (8, 1),
                delifeq: version >= (9, 0),
            },
            None => Self::SCRIPTS_ONLY,
        }
    }

    /// Whether a renewal of a lease without a lock-delay is one `SET … IFEQ` command.
    pub fn renews_natively(&self) -> bool {
        self.set_ifeq
    }

    /// Whether a release is `DELIFEQ` and a `PUBLISH`.
    pub fn releases_natively(&self) -> bool {
        self.delifeq
    }

    /// Reads them on `connection`, by `bound`. A server that refuses `INFO` (an ACL without
    /// it) has none: leasehold runs its scripts there. A server that does not answer in time,
    /// or answers another error (`LOADING`…), fails the connection (`NotSent`): nothing of
    /// leasehold's was sent on it.
    pub(super) async fn read(
        connection: &mut MultiplexedConnection,
        bound: Instant,
    ) -> Result<Self, SendFailure> {
        let mut info = redis::cmd("INFO");
        info.arg("server");
        match tokio::time::timeout_at(bound, info.query_async::<String>(connection)).await {
            Ok(Ok(text)) => Ok(Self::from_info(&text)),
            // Refused (an ACL without INFO) or unknown: the scripts do everything.
            Ok(Err(e)) if matches!(e.code(), Some("NOPERM" | "ERR")) => Ok(Self::SCRIPTS_ONLY),
            Ok(Err(e)) => Err(classify::connect_failure(&e)),
            Err(_) => Err(not_sent(
                "INFO server did not answer before the connect bound",
            )),
        }
    }
}

/// `major.minor` of a version's text.
fn version_of(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
}

impl fmt::Display for ServerCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.set_ifeq, self.delifeq) {
            (true, true) => f.write_str("renewals by SET … IFEQ, releases by DELIFEQ"),
            (true, false) => f.write_str("renewals by SET … IFEQ, releases by script"),
            _ => f.write_str("every operation by script"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_follow_the_server_and_its_version() {
        let valkey = |v: &str| {
            format!("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:{v}\r\n")
        };
        let rows = [
            (valkey("9.1.2"), true, true),
            (valkey("9.0.0"), true, true),
            (valkey("8.1.3"), true, false),
            (valkey("8.0.2"), false, false),
            (valkey("7.2.8"), false, false),
            (valkey("x.y"), false, false),
            ("redis_version:8.2.3\r\n".to_owned(), false, false),
            ("redis_version:8.4.0\r\n".to_owned(), false, false),
            ("redis_version:7.0.15\r\n".to_owned(), false, false),
            ("server_name:valkey\r\n".to_owned(), false, false),
            (String::new(), false, false),
        ];
        for (info, renews, releases) in rows {
            let found = ServerCapabilities::from_info(&info);
            assert_eq!(
                (found.renews_natively(), found.releases_natively()),
                (renews, releases),
                "{info:?}"
            );
        }
    }
}
