//! `leasehold`: run a command under a Redis lease (a distributed `flock`), or inspect one.
//!
//! Exit statuses are the table in [`EXIT_STATUS_HELP`]; every failure of leasehold itself
//! (bad arguments included) is 125 with one line on stderr, before anything reaches Redis.

mod inspect;
mod run;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use leasehold::protocol::limits::{self, DurationBounds};
use leasehold::{LeaseClient, LeaseError, LeaseSettings, Namespace, Purpose, ResourceDigest};

/// Exit statuses, modelled on `timeout(1)` and `flock(1)`.
pub(crate) mod status {
    /// Not acquired within `--wait`: someone else holds the lease.
    pub const NOT_ACQUIRED: u8 = 75;
    /// The lease was lost or became unknown while the command ran; it was stopped.
    pub const LEASE_LOST: u8 = 124;
    /// leasehold itself failed: bad arguments, Redis unavailable, acquisition unconfirmed.
    pub const FAILED: u8 = 125;
    /// The command exists but cannot be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// `inspect`: the resource is not held.
    pub const ABSENT: u8 = 1;
}

const EXIT_STATUS_HELP: &str = "\
Exit status of `run`:
  the command's   it ran to the end under the lease (128+N if killed by signal N)
  75              not acquired within --wait (held by someone else)
  124             the lease was lost or became unknown while the command ran; it was
                  stopped (or ended while leasehold could not vouch for the lease)
  125             leasehold itself failed: invalid arguments, Redis unavailable,
                  acquisition never confirmed, or (--require-replicas) fewer replicas
                  acknowledged the lease than --replicas; the command was not run
  126 / 127       the command cannot be executed / was not found
Exit status of `inspect`: 0 held, 1 absent, 125 error.

Environment: LEASEHOLD_REDIS_URL (default for --redis); LEASEHOLD_COMMAND_TIMEOUT,
LEASEHOLD_CONNECT_TIMEOUT, LEASEHOLD_DRIFT_BUDGET, LEASEHOLD_SAFETY_MARGIN (humantime).
The command gets LEASEHOLD_FENCING_TOKEN: pass it to every write the lease protects.";

/// Run a command under a Redis lease, or inspect one.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, after_help = EXIT_STATUS_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level on stderr: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "warn", value_parser = parse_level)]
    log_level: tracing::Level,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn parse_level(text: &str) -> Result<tracing::Level, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not one of error, warn, info, debug, trace"))
}

/// Logs go to stderr; stdout belongs to the command (and to `inspect`'s answer).
fn init_logging(format: LogFormat, level: tracing::Level) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level);
    // A second initialisation cannot happen here; ignore the error rather than abort.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Acquire the lease, run COMMAND under it, renew while it runs, release when it exits.
    ///
    /// If the lease is lost or becomes unknown (or a renewal cannot be confirmed before
    /// local validity ends), the command's process group gets SIGTERM, then SIGKILL at the
    /// end of --grace, which never extends past local validity; leasehold exits 124.
    /// SIGINT and SIGTERM sent to leasehold are forwarded to the command.
    #[command(after_help = EXIT_STATUS_HELP)]
    Run(run::RunArgs),
    /// Print whether the resource is held, the remaining TTL and the current fencing token
    /// (never an owner token). Exit 0 held, 1 absent, 125 error.
    #[command(after_help = EXIT_STATUS_HELP)]
    Inspect(inspect::InspectArgs),
}

/// Options shared by every subcommand.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss://… for TLS.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    redis: String,
    /// Key prefix isolating tenants or applications: [a-z0-9][a-z0-9._:-]{0,63}.
    #[arg(long, default_value = Namespace::DEFAULT, value_parser = parse_namespace)]
    namespace: Namespace,
    /// What the lease is for: [a-z0-9][a-z0-9._-]{0,63}.
    #[arg(long, default_value = "run", value_parser = parse_purpose)]
    purpose: Purpose,
    /// The resource: a raw id, hashed here (SHA-256); it never reaches Redis or the output.
    #[arg(long, value_name = "ID")]
    resource: String,
}

impl Common {
    /// The client, from `--redis`, `--namespace` and the `LEASEHOLD_*` environment.
    pub(crate) fn client(
        &self,
        settings: impl FnOnce(LeaseSettings) -> LeaseSettings,
    ) -> Result<LeaseClient, LeaseError> {
        let base = LeaseSettings::from_env()?.with_namespace(self.namespace.clone());
        LeaseClient::redis(&self.redis, settings(base))
    }

    pub(crate) fn purpose(&self) -> &Purpose {
        &self.purpose
    }

    pub(crate) fn resource(&self) -> ResourceDigest {
        ResourceDigest::of(self.resource.as_bytes())
    }
}

fn parse_namespace(text: &str) -> Result<Namespace, String> {
    Namespace::new(text).map_err(|e| e.to_string())
}

fn parse_purpose(text: &str) -> Result<Purpose, String> {
    Purpose::new(text).map_err(|e| e.to_string())
}

/// A humantime duration within `bounds`, with the library's error text.
pub(crate) fn parse_bounded(bounds: DurationBounds, text: &str) -> Result<Duration, String> {
    bounds.parse(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    parse_bounded(limits::TTL, text)
}

pub(crate) fn parse_wait(text: &str) -> Result<Duration, String> {
    parse_bounded(limits::WAIT_TIMEOUT, text)
}

pub(crate) fn parse_replica_wait(text: &str) -> Result<Duration, String> {
    parse_bounded(limits::REPLICA_WAIT, text)
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

/// Any humantime duration (its relations are checked by the library).
pub(crate) fn parse_any(text: &str) -> Result<Duration, String> {
    limits::parse_duration("duration", text).map_err(|e| e.to_string())
}

/// A library error in the words of the command line: which option (or environment
/// variable) it is about, then the library's text.
pub(crate) fn option_error(e: &LeaseError) -> String {
    let source = match e {
        LeaseError::InvalidDuration { param, .. } => match *param {
            "ttl" => "--ttl".to_owned(),
            "wait_timeout" => "--wait".to_owned(),
            "renew_every" => "--renew-every".to_owned(),
            "replica_wait" => "--replica-wait".to_owned(),
            other => format!("LEASEHOLD_{}", other.to_ascii_uppercase()),
        },
        LeaseError::InvalidReplicas { .. } => "--replicas".to_owned(),
        LeaseError::InvalidRedisUrl { .. } => "--redis".to_owned(),
        LeaseError::InvalidNamespace { .. } => "--namespace".to_owned(),
        LeaseError::InvalidPurpose { .. } => "--purpose".to_owned(),
        LeaseError::InvalidOperationId { .. } => "--operation-id".to_owned(),
        _ => return e.to_string(),
    };
    format!("{source}: {e}")
}

/// Prints one line on stderr and returns 125.
pub(crate) fn fail(message: impl std::fmt::Display) -> u8 {
    eprintln!("leasehold: {message}");
    status::FAILED
}

/// clap's error as one line: the message, the items it lists (missing options), and its
/// tip; the usage block would only repeat `--help`.
fn one_line(rendered: &str) -> String {
    let mut parts = Vec::new();
    for line in rendered.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more") {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line).to_owned());
    }
    let mut text = parts.join(" ");
    if text.is_empty() {
        text = "invalid arguments".to_owned();
    }
    if text.starts_with("unexpected argument") {
        // The usual cause: the command was not separated by `--`.
        text.push_str("; put the command after --");
    }
    format!("{text} (see --help)")
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            return ExitCode::from(fail(one_line(&e.render().to_string())));
        }
    };
    init_logging(cli.log_format, cli.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return ExitCode::from(fail(format!("cannot start the async runtime: {e}"))),
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Inspect(args) => inspect::inspect(args).await,
        }
    });
    ExitCode::from(code)
}
