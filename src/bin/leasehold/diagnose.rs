//! Failures in words an operator can act on: one line, naming the server (`host:port`,
//! never the password), what went wrong, and where to look.

use leasehold::{FailureDetail, FailureKind};

/// The server a URL names, as messages show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    /// `host:port`.
    addr: String,
    /// `rediss://`.
    tls: bool,
}

impl Server {
    /// From a `redis://` or `rediss://` URL (already accepted by the library): the
    /// credentials are dropped, the port defaults to 6379.
    pub(crate) fn of_url(url: &str) -> Server {
        let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        let has_port = host_port
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
            && !host_port.ends_with(']');
        let addr = if has_port {
            host_port.to_owned()
        } else {
            format!("{host_port}:6379")
        };
        Server {
            addr,
            tls: scheme.eq_ignore_ascii_case("rediss"),
        }
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// What `detail` means for this server, in one line.
    pub(crate) fn explain(&self, detail: &FailureDetail) -> String {
        let addr = &self.addr;
        // The redis client's texts can span lines (a parse error quotes the bytes it saw).
        let text = detail
            .message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let lower = text.to_ascii_lowercase();
        let has = |needle: &str| lower.contains(needle);
        if has("noperm") || has("no permissions") {
            return format!(
                "redis at {addr} denied permission (ACL): {text}; the README lists the \
                 commands and keys a leasehold user needs"
            );
        }
        if has("wrongpass") || has("authentication") || has("noauth") {
            return format!(
                "redis at {addr} refused the credentials (authentication failed): check the \
                 user and password in --redis or LEASEHOLD_REDIS_URL"
            );
        }
        match detail.kind {
            FailureKind::Connect if has("connection refused") => format!(
                "cannot connect to redis at {addr}: connection refused (nothing listens there)"
            ),
            FailureKind::Connect if has("parse error") || has("incompatible type") => format!(
                "{addr} did not answer as a Redis server ({text}){}",
                if self.tls {
                    ""
                } else {
                    "; if it expects TLS, use rediss://"
                }
            ),
            FailureKind::Connect if has("timed out") || has("timeout") => format!(
                "connecting to redis at {addr} timed out{}",
                if self.tls {
                    " (rediss:// expects TLS: is this a TLS port?)"
                } else {
                    " (LEASEHOLD_CONNECT_TIMEOUT sets the limit)"
                }
            ),
            FailureKind::Connect if self.tls && (has("tls") || has("certificate")) => {
                format!("TLS with redis at {addr} failed: {text}")
            }
            FailureKind::Connect => format!("cannot connect to redis at {addr}: {text}"),
            _ => format!("redis at {addr}: {}: {text}", detail.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(message: &str) -> FailureDetail {
        FailureDetail::new(FailureKind::Connect, message)
    }

    #[test]
    fn the_server_is_named_without_credentials() {
        let cases = [
            ("redis://127.0.0.1:6379", "127.0.0.1:6379", false),
            (
                "redis://:secret@db.internal:7000/2",
                "db.internal:7000",
                false,
            ),
            ("rediss://user:p@ss@db.internal", "db.internal:6379", true),
            ("redis://[::1]:6380", "[::1]:6380", false),
            ("redis://[::1]", "[::1]:6379", false),
        ];
        for (url, addr, tls) in cases {
            let server = Server::of_url(url);
            assert_eq!(server.addr, addr, "{url}");
            assert_eq!(server.tls, tls, "{url}");
        }
    }

    #[test]
    fn each_failure_reads_as_what_it_is_on_one_line() {
        let plain = Server::of_url("redis://db:6379");
        let tls = Server::of_url("rediss://db:6379");
        let cases = [
            (
                &plain,
                connect("Connection refused (os error 111)"),
                "connection refused",
            ),
            (
                &plain,
                connect("Incompatible type - Parse error at 1\nUnexpected `84`\n"),
                "did not answer as a Redis server",
            ),
            (&tls, connect("timed out"), "is this a TLS port"),
            (
                &plain,
                connect("Password authentication failed - AuthenticationFailed"),
                "authentication failed",
            ),
            (
                &plain,
                FailureDetail::new(
                    FailureKind::ServerRefused,
                    "NoPerm: this user has no permissions to run the 'evalsha' command",
                ),
                "denied permission (ACL)",
            ),
        ];
        for (server, detail, words) in cases {
            let line = server.explain(&detail);
            assert!(line.contains(words), "{detail:?} → {line:?}");
            assert!(line.contains("db:6379"), "{line:?} names no server");
            assert!(!line.contains('\n'), "{line:?} spans lines");
        }
    }
}
