//! The command line's configuration: options shared by the subcommands, their parsers, and
//! the one rule for `LEASEHOLD_*` variables — the CLI reads the variables the library reads
//! ([`LeaseSettings::from_lookup`]), with the same meaning; a flag overrides its variable;
//! an error names where the bad value came from (`--namespace` or `LEASEHOLD_NAMESPACE=…`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use leasehold::protocol::limits::{self, DurationBounds};
use leasehold::{
    HolderLabel, LeaseClient, LeaseError, LeaseSettings, Namespace, Purpose, REDIS_URL_ENV,
    ResourceDigest,
};

use crate::diagnose::{self, Server};
use crate::durations::{self, BadValue};
use crate::inputs;
use crate::keeper::Signal;
use crate::say;

use crate::variables::{
    NAMESPACE as NAMESPACE_ENV, REDIS_FILE as REDIS_FILE_ENV, RENEW_EVERY as RENEW_EVERY_ENV,
    RESOURCE as RESOURCE_ENV, RESOURCE_FILE as RESOURCE_FILE_ENV,
};
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// `--grace`: SIGTERM to SIGKILL. Bounded so that no arithmetic on it can overflow; it never
/// extends past local validity anyway, which is at most the longest TTL.
const GRACE: DurationBounds = DurationBounds {
    param: "grace",
    min: Duration::ZERO,
    max: limits::TTL.max,
};

/// `--kill-after`: a forwarded signal to SIGKILL.
const KILL_AFTER: DurationBounds = DurationBounds {
    param: "kill_after",
    min: Duration::ZERO,
    max: limits::TTL.max,
};

/// Where Redis is, and the namespace: what every subcommand needs.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss://… for TLS; a
    /// Sentinel-managed primary: redis+sentinel://[user:password@]host[:port][,host…]/master[/db];
    /// a Cluster: redis+cluster://[user:password@]host[:port][,host…]
    /// [env: LEASEHOLD_REDIS_URL] [default: redis://127.0.0.1:6379].
    #[arg(long, value_name = "URL", conflicts_with = "redis_file")]
    redis: Option<String>,
    /// Read the Redis URL from this file (one trailing newline is dropped), so its password
    /// does not show in `ps`: a regular file of at most 4096 bytes, best readable by its
    /// owner only (a warning says when it is not). Like --redis, it overrides
    /// LEASEHOLD_REDIS_URL [env: LEASEHOLD_REDIS_FILE; with LEASEHOLD_REDIS_URL set too,
    /// leasehold refuses to guess].
    #[arg(long, value_name = "PATH")]
    redis_file: Option<PathBuf>,
    /// Key prefix isolating tenants or applications: [a-z0-9][a-z0-9._:-]{0,63}
    /// [env: LEASEHOLD_NAMESPACE] [default: leasehold].
    #[arg(long, value_parser = parse_namespace)]
    namespace: Option<Namespace>,
}

/// Options shared by the subcommands about one lease.
#[derive(Debug, Args)]
pub(crate) struct Common {
    #[command(flatten)]
    connection: Connection,
    /// What the lease is for: [a-z0-9][a-z0-9._-]{0,63}.
    #[arg(long, default_value = "run", value_parser = parse_purpose)]
    purpose: Purpose,
    /// The resource: a raw id, hashed here (SHA-256); it never reaches Redis or the output
    /// [env: LEASEHOLD_RESOURCE].
    #[arg(long, value_name = "ID", conflicts_with = "resource_file")]
    resource: Option<String>,
    /// Read the resource id from this file (one trailing newline is dropped), so it does
    /// not show in `ps`: a regular file of at most 4096 bytes [env: LEASEHOLD_RESOURCE_FILE;
    /// with LEASEHOLD_RESOURCE set too, leasehold refuses to guess].
    #[arg(long, value_name = "PATH")]
    resource_file: Option<PathBuf>,
}

/// Where Redis is and the settings to use with it.
pub(crate) struct Target {
    pub(crate) url: String,
    /// Where the URL came from and the URL, its password masked, for errors about it
    /// (`--redis redis://u:***@db`).
    pub(crate) source: String,
    pub(crate) server: Server,
    pub(crate) settings: LeaseSettings,
}

/// A flag's value, for [`Common::client`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sourced<T> {
    flag: &'static str,
    value: T,
}

impl<T> Sourced<T> {
    pub(crate) fn flag(flag: &'static str, value: T) -> Self {
        Sourced { flag, value }
    }
}

impl Connection {
    /// The client: settings from the `LEASEHOLD_*` variables, overridden by `--namespace`
    /// and `renew_every` when given, and Redis at `--redis` or `$LEASEHOLD_REDIS_URL`.
    ///
    /// # Errors
    /// One line naming the flag or the variable (with its value) that is wrong.
    pub(crate) fn client(
        &self,
        renew_every: Option<Sourced<Duration>>,
    ) -> Result<(LeaseClient, Server), String> {
        let target = self.target(renew_every)?;
        let client = LeaseClient::redis(&target.url, target.settings)
            .map_err(|e| format!("{}: {e}", target.source))?;
        Ok((client, target.server))
    }

    /// Where and how to reach Redis, checked, before anything is built on it.
    ///
    /// # Errors
    /// As [`client`](Self::client), for the settings.
    pub(crate) fn target(&self, renew_every: Option<Sourced<Duration>>) -> Result<Target, String> {
        // The settings first: a wrong one is refused before the URL is looked at.
        let settings = self.settings(renew_every)?;
        let (url, source) = self.redis_url()?;
        diagnose::check_url(&url).map_err(|e| format!("{source}: {e}"))?;
        Ok(Target {
            server: Server::of_url(&url)
                .with_timeouts(settings.command_timeout, settings.connect_timeout),
            url,
            source,
            settings,
        })
    }

    /// The settings: the `LEASEHOLD_*` variables, overridden by `--namespace` and
    /// `renew_every` when given.
    ///
    /// # Errors
    /// One line naming the variable (or the flag) that is wrong.
    fn settings(&self, renew_every: Option<Sourced<Duration>>) -> Result<LeaseSettings, String> {
        let overridden = |var: &str| {
            (var == NAMESPACE_ENV && self.namespace.is_some())
                || (var == RENEW_EVERY_ENV && renew_every.is_some())
        };
        // Every variable read is text, or the run is refused: the library looks each up
        // before it judges any, and the first that is not text is the one refused.
        let not_text = std::cell::RefCell::new(None);
        let read = std::cell::RefCell::new(Vec::new());
        let settings = LeaseSettings::from_lookup(|var| {
            read.borrow_mut().push(var.to_owned());
            if overridden(var) {
                return None;
            }
            inputs::variable(var).unwrap_or_else(|refused| {
                not_text.borrow_mut().get_or_insert(refused);
                None
            })
        });
        if let Some(refused) = not_text.into_inner() {
            return Err(refused);
        }
        let mut settings = settings.map_err(|e| variable_error(&e, &read.into_inner()))?;
        if let Some(namespace) = &self.namespace {
            settings = settings.with_namespace(namespace.clone());
        }
        if let Some(every) = renew_every {
            settings = settings.with_renew_every(every.value);
            settings
                .validate()
                .map_err(|e| durations::option_error(every.flag, false, &e))?;
        }
        Ok(settings)
    }

    /// Where Redis is — `--redis`, `--redis-file`, their variables, or the default — and
    /// how to name it in a message (the URL masked: it may carry a password).
    ///
    /// # Errors
    /// Both variables set, or a file that cannot be read as one URL.
    fn redis_url(&self) -> Result<(String, String), String> {
        // Set but empty counts as unset, as the library reads it.
        let set = |var| inputs::variable(var).map(|v| v.filter(|v| !v.is_empty()));
        let (env_url, env_file) = match (&self.redis, &self.redis_file) {
            (None, None) => (set(REDIS_URL_ENV)?, set(REDIS_FILE_ENV)?),
            _ => (None, None),
        };
        if env_url.is_some() && env_file.is_some() {
            return Err(format!(
                "{REDIS_URL_ENV} and {REDIS_FILE_ENV} are both set: unset one, or give --redis \
                 or --redis-file"
            ));
        }
        let env_file = env_file.map(PathBuf::from);
        let file = match (&self.redis_file, &env_file) {
            (Some(path), _) => Some(inputs::FileSource::Flag("--redis-file", path)),
            (None, Some(path)) => Some(inputs::FileSource::Variable(REDIS_FILE_ENV, path)),
            (None, None) => None,
        };
        let from_file = match file {
            Some(file) => {
                let (url, warning) = inputs::redis_file(&file)?;
                if let Some(warning) = warning {
                    say::warn(warning);
                }
                Some((url, file))
            }
            None => None,
        };
        Ok(match (&self.redis, from_file, env_url) {
            (Some(url), _, _) => (url.clone(), format!("--redis {}", diagnose::masked(url))),
            (None, Some((url, file)), _) => {
                let source = format!("{file}: {}", diagnose::masked(&url));
                (url, source)
            }
            (None, None, Some(url)) => {
                let source = format!("{REDIS_URL_ENV}={}", diagnose::masked(&url));
                (url, source)
            }
            (None, None, None) => (
                DEFAULT_REDIS_URL.to_owned(),
                format!("the default --redis {DEFAULT_REDIS_URL}"),
            ),
        })
    }
}

impl Common {
    /// As [`Connection::client`].
    pub(crate) fn client(
        &self,
        renew_every: Option<Sourced<Duration>>,
    ) -> Result<(LeaseClient, Server), String> {
        self.connection.client(renew_every)
    }

    /// As [`Connection::target`].
    pub(crate) fn target(&self, renew_every: Option<Sourced<Duration>>) -> Result<Target, String> {
        self.connection.target(renew_every)
    }

    pub(crate) fn purpose(&self) -> &Purpose {
        &self.purpose
    }

    /// The resource's digest, from `--resource`, `--resource-file` or `$LEASEHOLD_RESOURCE`.
    ///
    /// # Errors
    /// None given, an unreadable file, or an empty id; the id itself is never echoed.
    pub(crate) fn resource(&self) -> Result<ResourceDigest, String> {
        let (from_env, env_file) = match (&self.resource, &self.resource_file) {
            (None, None) => (
                inputs::variable(RESOURCE_ENV)?,
                inputs::variable(RESOURCE_FILE_ENV)?.map(PathBuf::from),
            ),
            _ => (None, None),
        };
        if from_env.is_some() && env_file.is_some() {
            return Err(format!(
                "{RESOURCE_ENV} and {RESOURCE_FILE_ENV} are both set: unset one, or give \
                 --resource or --resource-file"
            ));
        }
        let file = match (&self.resource_file, &env_file) {
            (Some(path), _) => Some(inputs::FileSource::Flag("--resource-file", path)),
            (None, Some(path)) => Some(inputs::FileSource::Variable(RESOURCE_FILE_ENV, path)),
            (None, None) => None,
        };
        let (raw, source) = match (&self.resource, file, from_env) {
            (Some(raw), _, _) => (raw.clone().into_bytes(), "--resource".to_owned()),
            (None, Some(file), _) => (inputs::resource_file(&file)?, file.to_string()),
            (None, None, Some(raw)) => (raw.into_bytes(), RESOURCE_ENV.to_owned()),
            // Set but empty: refused below, not mistaken for "not given".
            (None, None, None) => {
                return Err(format!(
                    "no resource: give --resource ID, --resource-file PATH, {RESOURCE_ENV} or \
                     {RESOURCE_FILE_ENV}"
                ));
            }
        };
        if raw.is_empty() {
            return Err(format!("{source}: the resource id is empty"));
        }
        Ok(ResourceDigest::of(&raw))
    }
}

/// The variable of the library's setting `param` (`command_timeout`:
/// `LEASEHOLD_COMMAND_TIMEOUT`), as [`LeaseSettings::from_env`] names it.
fn setting_variable(param: &str) -> String {
    format!("LEASEHOLD_{}", param.to_ascii_uppercase())
}

/// A settings error from the variables (the library `read` them), naming the variable and
/// its value.
fn variable_error(e: &LeaseError, read: &[String]) -> String {
    let param = match e {
        LeaseError::InvalidNamespace { .. } => Some("namespace"),
        LeaseError::InvalidDuration { param, .. } => Some(*param),
        _ => None,
    };
    match param.map(setting_variable).filter(|var| read.contains(var)) {
        Some(var) => durations::variable_error(&var, &std::env::var(&var).unwrap_or_default(), e),
        None => e.to_string(),
    }
}

/// A library error in the words of the command line: the option it is about, its value,
/// and what it takes.
pub(crate) fn option_error(e: &LeaseError) -> String {
    option_error_with(e, &[])
}

/// As [`option_error`]; an error about a parameter of `defaulted` names its value as the
/// option's default, which the user did not give.
pub(crate) fn option_error_with(e: &LeaseError, defaulted: &[&str]) -> String {
    let source = match e {
        LeaseError::InvalidDuration { param, .. } => match *param {
            "ttl" => "--ttl".to_owned(),
            "wait_timeout" => "--wait".to_owned(),
            // The variable's bounds are checked as it is read, its relation to the TTL by
            // `crate::ttl::check`, each naming the variable: what is left is the flag's.
            "renew_every" => "--renew-every".to_owned(),
            "replica_wait" => "--replica-wait".to_owned(),
            "lock_delay" => "--lock-delay".to_owned(),
            "list_budget" => "--budget".to_owned(),
            other => setting_variable(other),
        },
        LeaseError::InvalidReplicas { .. } => "--replicas".to_owned(),
        LeaseError::InvalidPermits { .. } => "--permits".to_owned(),
        LeaseError::InvalidOperationId { .. } => "--operation-id".to_owned(),
        _ => return e.to_string(),
    };
    let defaulted =
        matches!(e, LeaseError::InvalidDuration { param, .. } if defaulted.contains(param));
    durations::option_error(&source, defaulted, e)
}

fn parse_namespace(text: &str) -> Result<Namespace, String> {
    Namespace::new(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_purpose(text: &str) -> Result<Purpose, String> {
    Purpose::new(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_holder(text: &str) -> Result<HolderLabel, String> {
    HolderLabel::new(text).map_err(|e| e.to_string())
}

/// `<hostname>:<pid>`, the hostname cut to fit the label's 64 bytes; none if the host has
/// no name a label can hold.
pub(crate) fn default_holder() -> Option<HolderLabel> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the local buffer.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host = std::str::from_utf8(&buf[..end]).ok()?;
    let pid = format!(":{}", std::process::id());
    let room = limits::HOLDER_MAX_LEN.saturating_sub(pid.len());
    let host = host.get(..host.len().min(room))?;
    HolderLabel::new(&format!("{host}{pid}")).ok()
}

/// `--timeout`: the command's longest run. Bounded so that no deadline arithmetic on it can
/// overflow.
const TIMEOUT: DurationBounds = DurationBounds {
    param: "timeout",
    min: Duration::from_millis(1),
    max: Duration::from_secs(30 * 24 * 3600),
};

/// A TTL of at most the longest lease. Its minimum depends on `--renew-every` too, which
/// is not known here: the run checks it with the request (`crate::ttl::check`); a refusal
/// here names the minimum the settings in force give without it, as `--help` does.
pub(crate) fn parse_ttl(text: &str) -> Result<Duration, BadValue> {
    durations::up_to("--ttl", crate::ttl::accepted(), text)
}

pub(crate) fn parse_wait(text: &str) -> Result<Duration, BadValue> {
    durations::option("--wait", limits::WAIT_TIMEOUT, text)
}

pub(crate) fn parse_replica_wait(text: &str) -> Result<Duration, BadValue> {
    durations::option("--replica-wait", limits::REPLICA_WAIT, text)
}

pub(crate) fn parse_grace(text: &str) -> Result<Duration, BadValue> {
    durations::option("--grace", GRACE, text)
}

pub(crate) fn parse_list_budget(text: &str) -> Result<Duration, BadValue> {
    durations::option("--budget", limits::LIST_BUDGET, text)
}

pub(crate) fn parse_lock_delay(text: &str) -> Result<Duration, BadValue> {
    durations::option("--lock-delay", limits::LOCK_DELAY, text)
}

pub(crate) fn parse_kill_after(text: &str) -> Result<Duration, BadValue> {
    durations::option("--kill-after", KILL_AFTER, text)
}

pub(crate) fn parse_timeout(text: &str) -> Result<Duration, BadValue> {
    durations::option("--timeout", TIMEOUT, text)
}

/// A signal `--timeout` may send, by name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub(crate) fn parse_signal(text: &str) -> Result<Signal, String> {
    let name = text.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    let signals = || std::iter::once(Signal::Kill).chain(Signal::FORWARDED);
    let found = match name.parse::<i32>() {
        Ok(raw) => Signal::from_raw(raw),
        Err(_) => signals().find(|s| s.name().strip_prefix("SIG") == Some(name)),
    };
    found.ok_or_else(|| {
        format!(
            "{text:?} is not one of HUP, INT, QUIT, TERM, USR1, USR2, ALRM, KILL (or their numbers)"
        )
    })
}

/// Its relation to the TTL is checked with the request (`crate::ttl::check`).
pub(crate) fn parse_renew_every(text: &str) -> Result<Duration, BadValue> {
    durations::option("--renew-every", limits::RENEW_EVERY, text)
}

/// A replica count in `1 ..= MAX_REPLICAS`, with the library's error text.
pub(crate) fn parse_replicas(text: &str) -> Result<u32, String> {
    let value: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of replicas"))?;
    if (1..=limits::MAX_REPLICAS).contains(&value) {
        Ok(value)
    } else {
        Err(LeaseError::InvalidReplicas {
            value,
            max: limits::MAX_REPLICAS,
        }
        .to_string())
    }
}

/// A counted lease's permits in `1 ..= MAX_PERMITS`, with the library's error text.
pub(crate) fn parse_permits(text: &str) -> Result<u16, String> {
    let value: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of permits"))?;
    limits::check_permits(value).map_err(|e| e.to_string())
}

/// `host:port`, a name resolved now (the first address it resolves to).
pub(crate) fn parse_socket_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs as _;
    text.to_socket_addrs()
        .map_err(|e| format!("{text:?} is not a host:port ({e})"))?
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}
