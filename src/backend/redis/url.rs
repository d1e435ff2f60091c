//! One URL for every deployment: `redis://` and `rediss://` name a standalone node, as
//! always; `redis+sentinel://` names the primary that Redis Sentinel knows by a name, and
//! `redis+cluster://` a Redis Cluster, each by a list of hosts — so a `LEASEHOLD_REDIS_URL`
//! or a command line's `--redis` reaches any of them ([`RedisConfig::from_url`]).

use super::config::RedisConfig;
use crate::error::LeaseError;

/// Sentinel's port when a host names none.
const SENTINEL_PORT: &str = "26379";
/// Redis's port when a host names none.
const REDIS_PORT: &str = "6379";

impl RedisConfig {
    /// The configuration a URL names — one way a string becomes a deployment:
    ///
    /// * `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS, with the `tls`
    ///   feature), `unix:///path`: a standalone node ([`new`](Self::new)).
    /// * `redis+sentinel://[user:password@]host[:port][,host[:port]…]/master[/db]`: the
    ///   primary the sentinels at those hosts (port 26379 unless given) know as `master`
    ///   ([`sentinel`](Self::sentinel)). The user, password and database are the data
    ///   nodes'; the sentinels are asked without credentials. `rediss+sentinel://` uses TLS
    ///   for both.
    /// * `redis+cluster://[user:password@]host[:port][,host[:port]…]`: a Redis Cluster
    ///   found through those seeds (port 6379 unless given), the login used for every node
    ///   ([`cluster`](Self::cluster)). `rediss+cluster://` uses TLS.
    ///
    /// A query (`?protocol=resp3`) or fragment (`#insecure`) is kept for every URL made
    /// from it.
    ///
    /// # Errors
    /// [`LeaseError::InvalidRedisUrl`] for a list URL that names no host, an empty host, a
    /// sentinel URL without its master's name, a cluster URL with a database; the URL is
    /// never echoed (it may carry a password). A standalone URL is checked by
    /// [`RedisBackend::new`](crate::RedisBackend::new), as for [`new`](Self::new). No I/O.
    ///
    /// ```
    /// # fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{RedisBackend, RedisConfig};
    /// let config = RedisConfig::from_url("redis+sentinel://lease-user:secret@10.0.0.1,10.0.0.2/leases/2")?;
    /// let backend = RedisBackend::new(config)?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn from_url(url: &str) -> Result<Self, LeaseError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Self::new(url));
        };
        let (tls, kind) = match scheme {
            "redis+sentinel" => (false, Kind::Sentinel),
            "rediss+sentinel" => (true, Kind::Sentinel),
            "redis+cluster" => (false, Kind::Cluster),
            "rediss+cluster" => (true, Kind::Cluster),
            _ => return Ok(Self::new(url)),
        };
        let parts = Parts::of(rest, kind)?;
        let base = if tls { "rediss" } else { "redis" };
        let at = |host: &str, path: &str| {
            format!(
                "{base}://{}{host}{path}{}",
                parts.login.map_or(String::new(), |l| format!("{l}@")),
                parts.tail
            )
        };
        Ok(match kind {
            Kind::Sentinel => {
                let sentinels = parts
                    .hosts
                    .iter()
                    .map(|host| format!("{base}://{host}{}", parts.tail))
                    .collect();
                let db = parts.db.map_or(String::new(), |db| format!("/{db}"));
                Self::sentinel(sentinels, parts.master.unwrap_or_default())
                    .sentinel_node_url_template(at("primary", &db))
            }
            Kind::Cluster => Self::cluster(parts.hosts.iter().map(|host| at(host, "")).collect()),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sentinel,
    Cluster,
}

/// A list URL after its scheme, taken apart.
struct Parts<'a> {
    /// `user:password`, as written.
    login: Option<&'a str>,
    /// `host:port` each, the default port added.
    hosts: Vec<String>,
    master: Option<String>,
    db: Option<&'a str>,
    /// The query and fragment, as written (with their `?` or `#`).
    tail: &'a str,
}

impl<'a> Parts<'a> {
    fn of(rest: &'a str, kind: Kind) -> Result<Parts<'a>, LeaseError> {
        let split = rest.find(['?', '#']).unwrap_or(rest.len());
        let (rest, tail) = rest.split_at(split);
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (login, hosts) = match authority.rsplit_once('@') {
            Some((login, hosts)) => (Some(login), hosts),
            None => (None, authority),
        };
        let default_port = match kind {
            Kind::Sentinel => SENTINEL_PORT,
            Kind::Cluster => REDIS_PORT,
        };
        let hosts = hosts
            .split(',')
            .map(|host| with_port(host, default_port))
            .collect::<Result<Vec<_>, _>>()?;
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let (master, db) = match kind {
            Kind::Sentinel => {
                let master = segments.next().ok_or_else(|| {
                    invalid("a sentinel URL names its master: redis+sentinel://host,host/master")
                })?;
                (Some(decode(master)?), segments.next())
            }
            Kind::Cluster => (None, segments.next()),
        };
        if kind == Kind::Cluster && db.is_some_and(|db| db != "0") {
            return Err(invalid("a cluster has only database 0"));
        }
        if segments.next().is_some() {
            return Err(invalid(
                "the URL's path has more parts than master and database",
            ));
        }
        if let Some(db) = db
            && db.parse::<u16>().is_err()
        {
            return Err(invalid("the database is not a number"));
        }
        Ok(Parts {
            login,
            hosts,
            master,
            db,
            tail,
        })
    }
}

/// `host` with `port` when it names none; an IPv6 address in brackets keeps them.
fn with_port(host: &str, port: &str) -> Result<String, LeaseError> {
    if host.is_empty() {
        return Err(invalid("a host in the list is empty"));
    }
    let bare = match host.rsplit_once(']') {
        Some((_, after)) => after.is_empty(),
        None => !host.contains(':'),
    };
    Ok(if bare {
        format!("{host}:{port}")
    } else {
        host.to_owned()
    })
}

/// A percent-encoded path segment, decoded (a master's name may hold any character).
fn decode(segment: &str) -> Result<String, LeaseError> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| invalid("a bad percent-escape in the master's name"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| invalid("the master's name is not UTF-8"))
}

fn invalid(reason: &str) -> LeaseError {
    LeaseError::InvalidRedisUrl {
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Target;
    use super::*;

    fn parsed(url: &str) -> (Vec<String>, Option<String>, Option<String>) {
        let config = RedisConfig::from_url(url).expect("valid");
        match config.target {
            Target::Standalone { url } => (vec![url], None, config.node_url_template),
            Target::Sentinel {
                sentinels,
                master_name,
            } => (sentinels, Some(master_name), config.node_url_template),
            Target::Cluster { seeds } => (seeds, None, config.node_url_template),
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A URL; the URLs it becomes (standalone, sentinels or seeds); the master's name; the
    /// data nodes' template.
    type Row = (
        &'static str,
        &'static [&'static str],
        Option<&'static str>,
        Option<&'static str>,
    );

    #[test]
    fn each_scheme_names_its_deployment() {
        #[rustfmt::skip]
        let rows: &[Row] = &[
            ("redis://u:p@db:6380/2", &["redis://u:p@db:6380/2"], None, None),
            ("unix:///run/redis.sock", &["unix:///run/redis.sock"], None, None),
            ("redis+sentinel://s1,s2:26380/leases",
                &["redis://s1:26379", "redis://s2:26380"], Some("leases"), Some("redis://primary")),
            ("redis+sentinel://u:p@s1/leases/3",
                &["redis://s1:26379"], Some("leases"), Some("redis://u:p@primary/3")),
            ("rediss+sentinel://s1/my%20master#insecure",
                &["rediss://s1:26379#insecure"], Some("my master"), Some("rediss://primary#insecure")),
            ("redis+cluster://u:p@n1:7000,n2,[::1]:7002,[::1]",
                &["redis://u:p@n1:7000", "redis://u:p@n2:6379", "redis://u:p@[::1]:7002", "redis://u:p@[::1]:6379"], None, None),
            ("rediss+cluster://n1:7000/0?protocol=resp3",
                &["rediss://n1:7000?protocol=resp3"], None, None),
        ];
        for &(url, hosts, master, template) in rows {
            assert_eq!(
                parsed(url),
                (
                    strings(hosts),
                    master.map(str::to_owned),
                    template.map(str::to_owned)
                ),
                "{url}"
            );
        }
    }

    #[test]
    fn a_list_url_that_is_wrong_is_refused_without_echoing_it() {
        let rows = [
            ("redis+sentinel://u:secret@s1", "names its master"),
            ("redis+sentinel://u:secret@s1,,s2/m", "empty"),
            ("redis+cluster://u:secret@", "empty"),
            ("redis+cluster://u:secret@n1/3", "only database 0"),
            ("redis+sentinel://u:secret@s1/m/x", "not a number"),
            ("redis+sentinel://u:secret@s1/m/1/2", "more parts"),
            ("redis+sentinel://u:secret@s1/m%zz", "percent-escape"),
        ];
        for (url, why) in rows {
            let Err(LeaseError::InvalidRedisUrl { reason }) = RedisConfig::from_url(url) else {
                panic!("{url}: accepted");
            };
            assert!(reason.contains(why), "{url}: {reason}");
            assert!(!reason.contains("secret"), "{url}: {reason}");
        }
    }
}
