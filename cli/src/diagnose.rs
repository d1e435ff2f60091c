//! Failures in words an operator can act on: one line, naming the server (`host:port`,
//! never the password), what went wrong, and where to look.

use std::time::Duration;

use leasehold::{FailureDetail, FailureKind};

/// The server a URL names, as messages show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    /// `host:port`, or a socket's path.
    addr: String,
    /// `rediss://`.
    tls: bool,
    /// The command and connect timeouts in force, for saying which one ran out.
    timeouts: Option<(Duration, Duration)>,
}

/// The schemes the library's URLs take.
const SCHEMES: [&str; 4] = ["redis", "rediss", "unix", "redis+unix"];

/// The schemes of a URL naming a list of hosts: a Sentinel-managed primary or a Cluster
/// ([`leasehold::RedisConfig::from_url`]).
const LIST_SCHEMES: [&str; 4] = [
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
];

/// How a URL naming a list of hosts is written, for a message.
const LIST_SHAPES: &str = "redis+sentinel://[user:password@]host[:port][,host[:port]…]/master[/db] \
                           or redis+cluster://[user:password@]host[:port][,host[:port]…]";

/// Whether `url` names a list of hosts (Sentinel or Cluster).
fn is_list(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| LIST_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
}

/// `url` as a message may show it: what could be a password is `***` — the user
/// information's after the user name (all of it without one), up to the last `@`, and a
/// query's `pass=` or `password=` value (a socket's URL carries its password there).
pub(crate) fn masked(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").map_or(("", url), |(s, r)| (s, r));
    let (user, rest) = match rest.rsplit_once('@') {
        Some((info, host)) => match info.split_once(':') {
            Some((user, _)) => (format!("{user}:***@"), host),
            None => ("***@".to_owned(), host),
        },
        None => (String::new(), rest),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.to_ascii_lowercase().contains("pass") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => rest.to_owned(),
    };
    let scheme = if scheme.is_empty() && !url.contains("://") {
        String::new()
    } else {
        format!("{scheme}://")
    };
    format!("{scheme}{user}{rest}")
}

/// Checks that the text is a URL, of a scheme leasehold speaks, naming a host and a port
/// that can be, saying what the library's "did not parse" would not; then that the
/// library reads it. Credentials are never shown.
///
/// # Errors
/// One line saying what is wrong and what to write instead.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    check_parts(url)?;
    if is_list(url) {
        // The library's own reading, which connects to nothing.
        return leasehold::RedisConfig::from_url(url)
            .map(drop)
            .map_err(|e| format!("not a Redis URL leasehold can read ({e}); write {LIST_SHAPES}"));
    }
    // The parser the library's client uses; it reads without connecting.
    redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| {
        // Its text ends with the error's kind, which says nothing to the user.
        let text = e.to_string().replacen(" - InvalidClientConfig", "", 1);
        let mut chars = text.chars();
        let reason: String = chars
            .next()
            .map(|c| c.to_ascii_lowercase())
            .into_iter()
            .chain(chars)
            .collect();
        let scheme = url.split_once("://").map_or("redis", |(s, _)| s);
        let shape = if scheme.to_ascii_lowercase().ends_with("unix") {
            format!("{scheme}:///path/to/redis.sock[?db=N]")
        } else {
            format!(
                "{scheme}://[user:password@]host[:port][/db], an IPv6 host in brackets \
                 ({scheme}://[::1]:6379)"
            )
        };
        format!("not a Redis URL leasehold can read ({reason}); write {shape}")
    })?;
    Ok(())
}

/// An IPv6 host without its brackets, or without the closing one: the port cannot be told
/// from the address.
fn ipv6_unbracketed(host_port: &str) -> bool {
    match host_port.strip_prefix('[') {
        Some(inside) => !inside.contains(']'),
        None => host_port.matches(':').count() > 1,
    }
}

/// What [`check_url`] checks before the library's parser.
fn check_parts(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        let host = url.rsplit_once('@').map_or(url, |(_, host)| host);
        return Err(format!(
            "not a URL (no scheme): write redis://{host} (rediss:// for TLS)"
        ));
    };
    let lower = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&lower.as_str()) && !LIST_SCHEMES.contains(&lower.as_str()) {
        let whose = match lower.as_str() {
            "http" | "https" => ", a web server's",
            _ => "",
        };
        return Err(format!(
            "the scheme is {scheme}://{whose}; leasehold speaks redis:// (rediss:// for TLS, \
             unix:// for a socket, redis+sentinel:// and redis+cluster:// for a list of hosts)"
        ));
    }
    if lower.ends_with("unix") {
        return Ok(());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    hosts
        .split(',')
        .try_for_each(|host_port| check_host(&lower, host_port))
}

/// One `host[:port]` of a URL of scheme `lower`.
fn check_host(lower: &str, host_port: &str) -> Result<(), String> {
    if ipv6_unbracketed(host_port) {
        return Err(format!(
            "an IPv6 host goes in brackets, with the port after them, as in \
             {lower}://[::1]:6379"
        ));
    }
    let (host, port) = match host_port.rsplit_once(':') {
        // An IPv6 literal's colons are inside its brackets.
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (host_port, None),
    };
    if host.is_empty() || host == "[]" {
        return Err(format!(
            "the URL names no host: write {lower}://host:port (e.g. {lower}://127.0.0.1:6379)"
        ));
    }
    if let Some(port) = port
        && !port.is_empty()
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!(
            "the port {port:?} of host {host} is not a port number (1 ..= 65535)"
        ));
    }
    Ok(())
}

impl Server {
    /// From a `redis://`, `rediss://` or `unix://` URL (already checked): the
    /// credentials are dropped, the port defaults to 6379.
    pub(crate) fn of_url(url: &str) -> Server {
        let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
        if is_list(url) {
            // The hosts as written, without credentials.
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            return Server {
                addr: authority
                    .rsplit_once('@')
                    .map_or(authority, |(_, hosts)| hosts)
                    .to_owned(),
                tls: scheme.to_ascii_lowercase().starts_with("rediss"),
                timeouts: None,
            };
        }
        if scheme.to_ascii_lowercase().ends_with("unix") {
            // A socket: its path, without the query (which may carry a password).
            return Server {
                addr: rest.split(['?', '#']).next().unwrap_or_default().to_owned(),
                tls: false,
                timeouts: None,
            };
        }
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
            timeouts: None,
        }
    }

    /// With the command and connect timeouts in force, so that a timeout names the one that
    /// ran out.
    pub(crate) fn with_timeouts(mut self, command: Duration, connect: Duration) -> Server {
        self.timeouts = Some((command, connect));
        self
    }

    /// Which setting bounds a connection attempt, as ` after 500ms (…)`: the connect
    /// timeout, or the command timeout when that is shorter (a call's connection is made
    /// within the call's time).
    fn connect_limit(&self) -> String {
        let h = |d: Duration| humantime::format_duration(d).to_string();
        match self.timeouts {
            Some((command, connect)) if command < connect => format!(
                " after {}: the command timeout (LEASEHOLD_COMMAND_TIMEOUT) bounds each call, \
                 its connection included, and is shorter than LEASEHOLD_CONNECT_TIMEOUT ({})",
                h(command),
                h(connect)
            ),
            Some((_, connect)) => format!(
                " after {} (LEASEHOLD_CONNECT_TIMEOUT sets the limit)",
                h(connect)
            ),
            None => " (LEASEHOLD_CONNECT_TIMEOUT sets the limit)".to_owned(),
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
                "redis at {addr} denied permission (ACL): {text}; leasehold's production \
                 guide (docs/production.md) lists the commands and keys a leasehold user needs"
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
                "connecting to redis at {addr} timed out{}{}",
                self.connect_limit(),
                if self.tls {
                    "; rediss:// expects TLS: is this a TLS port?"
                } else {
                    ""
                }
            ),
            FailureKind::Connect if self.tls && (has("tls") || has("certificate")) => {
                format!("TLS with redis at {addr} failed: {text}")
            }
            FailureKind::Connect => format!("cannot connect to redis at {addr}: {text}"),
            FailureKind::Timeout => format!(
                "redis at {addr} did not answer in time: {text} (LEASEHOLD_COMMAND_TIMEOUT \
                 sets the limit)"
            ),
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
            (
                "unix:///run/redis.sock?pass=secret",
                "/run/redis.sock",
                false,
            ),
        ];
        for (url, addr, tls) in cases {
            let server = Server::of_url(url);
            assert_eq!(server.addr, addr, "{url}");
            assert_eq!(server.tls, tls, "{url}");
        }
    }

    #[test]
    fn a_url_leasehold_cannot_use_is_named_by_its_problem() {
        let cases = [
            ("db.internal:6379", "write redis://db.internal:6379"),
            ("user:secret@db:6379", "write redis://db:6379"),
            ("http://db:6379", "the scheme is http://"),
            ("redis://:6379", "names no host"),
            ("redis://db:99999", "not a port number"),
            ("redis://db:0", "not a port number"),
            ("redis://[::1:6379", "IPv6 host goes in brackets"),
            ("redis://u:secret@::1:6379", "IPv6 host goes in brackets"),
            ("redis://u:secret@db:6379/x", "(invalid database number)"),
            (
                "redis://db/?protocol=9",
                "write redis://[user:password@]host",
            ),
        ];
        for (url, words) in cases {
            let line = check_url(url).expect_err(url);
            assert!(line.contains(words), "{url} → {line}");
            assert!(!line.contains("secret"), "{line}");
        }
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://u:p@db",
            "redis://[::1]:6380/2",
            "redis://[::1]",
            "unix:///run/redis.sock",
        ] {
            assert_eq!(check_url(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn a_url_is_shown_with_what_could_be_a_password_masked() {
        let cases = [
            ("redis://db:6379", "redis://db:6379"),
            ("redis://ops:secret@[::1:6379", "redis://ops:***@[::1:6379"),
            ("rediss://:p@ss:secret@db/2", "rediss://:***@db/2"),
            ("redis://secret@db", "redis://***@db"),
            ("u:secret@db:6379", "u:***@db:6379"),
            (
                "unix:///run/redis.sock?db=2&pass=secret",
                "unix:///run/redis.sock?db=2&pass=***",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(masked(url), shown, "{url}");
        }
    }

    #[test]
    fn a_connect_timeout_names_the_setting_that_ran_out() {
        let ms = Duration::from_millis;
        let timed_out = connect("connect timed out");
        let command_first = Server::of_url("redis://db:6379").with_timeouts(ms(300), ms(1000));
        let line = command_first.explain(&timed_out);
        assert!(
            line.contains("timed out after 300ms: the command timeout (LEASEHOLD_COMMAND_TIMEOUT)"),
            "{line}"
        );
        let connect_first = Server::of_url("redis://db:6379").with_timeouts(ms(2000), ms(500));
        let line = connect_first.explain(&timed_out);
        assert!(
            line.contains("timed out after 500ms (LEASEHOLD_CONNECT_TIMEOUT sets the limit)"),
            "{line}"
        );
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
