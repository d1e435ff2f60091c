//! `leasehold`: run a command under a Redis lease (a distributed `flock`), or inspect one.
//!
//! Exit statuses are the tables in [`RUN_EXIT_STATUS_HELP`] and [`INSPECT_EXIT_STATUS_HELP`];
//! every failure of leasehold itself (bad arguments included) is 125 with one line on
//! stderr, before anything reaches Redis.

/// One line for the operator on stderr (see [`say`]): `say!("… {x} …")`.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::warn(format_args!($($arg)*))
    };
}

mod acquire;
#[cfg(test)]
mod cli_tests;
mod completions;
mod config;
mod diagnose;
mod doctor;
mod durations;
mod holders;
mod inputs;
mod inspect;
mod keeper;
mod list;
mod manual;
mod recheck;
mod replicas;
mod run;
mod say;
mod signals;
mod supervise;
mod ttl;
mod variables;
mod waiting;
mod watch;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

pub(crate) use config::Common;

/// Exit statuses, modelled on `timeout(1)` and `flock(1)`.
pub(crate) mod status {
    /// Not acquired within `--wait`: someone else holds the lease.
    pub const NOT_ACQUIRED: u8 = 75;
    /// A process of the command refused leasehold's signals (it gained privileges, with
    /// `--allow-new-privileges`): it was never said stopped.
    pub const NOT_STOPPED: u8 = 122;
    /// The lease was lost or became unknown while the command ran; it was stopped.
    pub const LEASE_LOST: u8 = 124;
    /// `--timeout` ran out first: the status timeout(1) gives, which is the same number.
    pub const TIMED_OUT: u8 = 124;
    /// leasehold itself failed: bad arguments, Redis unavailable, acquisition unconfirmed.
    pub const FAILED: u8 = 125;
    /// The command exists but cannot be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// `inspect`: the resource is not held.
    pub const ABSENT: u8 = 1;
}

const RUN_EXIT_STATUS_HELP: &str = "\
Exit status:
  the command's   it ran to the end under the lease (128+N if killed by signal N)
  75              not acquired within --wait (held by someone else — every slot, with
                  --permits — or in its lock-delay)
  122             a process of the command refused leasehold's signals (a setuid program
                  run with --allow-new-privileges): one line names it; if it still ran
                  when the command had to be stopped, the lease was not released (it
                  stays held until its TTL ends)
  124             the lease was lost or became unknown while the command (or, with
                  --wait-for-descendants, a process it left behind) ran; every process
                  of the command was stopped (or it ended while leasehold could not vouch
                  for the lease); or, as timeout(1), --timeout ran out first
  125             leasehold itself failed: invalid arguments, Redis unavailable,
                  acquisition never confirmed, (--require-replicas) fewer replicas
                  acknowledged the lease than --replicas, or the fuse did not arm its
                  timer before local validity's end; the command was not run
  126 / 127       the command cannot be executed / was not found
  128+N           signal N (HUP, INT, QUIT, TERM, USR1, USR2, ALRM) reached leasehold
                  before the command started: it was not run, and whatever was acquired
                  was released

Signals: HUP, INT, QUIT, TERM, USR1, USR2 and ALRM sent to leasehold are forwarded to the
command's process group (to every process it left behind, once it exited).

Short options, as flock(1) and timeout(1) spell them: -w DURATION (--wait), -n (--no-wait),
-E N (--conflict-exit-code), -k DURATION (--kill-after), -s SIGNAL (--signal, with
--timeout). Durations are humantime (1m 30s, 250ms) or a bare number of seconds (10, 0.5).

Processes: the command runs under a keeper process, by default in a PID namespace of its
own whose init is the keeper (where the host allows it: root, or unprivileged user
namespaces), so every process it starts (backgrounded, double-forked, setsid, setuid)
stays in it and the kernel kills them all when any of leasehold's processes dies or, all
of them frozen, at local validity's end; in it the command is pid 2 and sees only its own
processes (--pid-namespace off: the host's pids, the keeper alone, a child subreaper).
When the command exits, the processes it left behind are stopped (SIGTERM, SIGKILL after
--grace) before the lease is released, unless --wait-for-descendants. When the lease is
lost, every one of them gets SIGTERM, then SIGKILL (after --grace; within one renewal
period once Redis says the lease is gone). The command starts with no_new_privs: setuid
programs grant it nothing (--allow-new-privileges lifts it).

Environment: every option that says where Redis is, which lease and how it is held, or
what leasehold prints has a variable, LEASEHOLD_ and its long name in capitals, - as _
(--lock-delay: LEASEHOLD_LOCK_DELAY; --redis: LEASEHOLD_REDIS_URL), as its [env: …] says;
a flag overrides its variable, which takes what the flag takes. The options about the
command's processes and signals, and --no-wait, have none (--pid-namespace has one). Also
read: LEASEHOLD_COMMAND_TIMEOUT, LEASEHOLD_CONNECT_TIMEOUT, LEASEHOLD_DRIFT_BUDGET,
LEASEHOLD_RETRY_AFTER_FALLBACK, LEASEHOLD_SAFETY_MARGIN (humantime durations). The command
gets LEASEHOLD_FENCING_TOKEN:
pass it to every write the lease protects; under --permits also LEASEHOLD_SLOT, the slot
it holds (0 ..= N-1), with which the token fences.";

const INSPECT_EXIT_STATUS_HELP: &str = "\
Exit status:
  0     the resource is held (--watch: stopped by SIGINT, SIGTERM or SIGHUP)
  1     the resource is not held
  125   leasehold itself failed: invalid arguments, Redis unavailable

Environment: each option's [env: …] (a flag overrides its variable; --watch has none);
also LEASEHOLD_COMMAND_TIMEOUT, LEASEHOLD_CONNECT_TIMEOUT.";

const LIST_EXIT_STATUS_HELP: &str = "\
Exit status:
  0     listed (none held is an empty list); when --limit or --budget cut the listing
        short, a line on stderr says so (for the budget: incomplete), as --json does
  125   leasehold itself failed: invalid arguments, Redis unavailable

Each line: purpose, resource digest (the raw id is never stored), holder label, fencing
token, remaining time. Never an owner token.";

const DOCTOR_EXIT_STATUS_HELP: &str = "\
Exit status:
  0     leases work for this user (warnings, if any, say what a setting risks)
  125   they do not (each FAIL line says why), or invalid arguments

Each finding is one line on stdout: ok, warn or FAIL, then what it means (with --json, one
object).";

const DOCS_EXIT_STATUS_HELP: &str = "\
Exit status:
  0     printed (or written)
  125   invalid arguments, or the output could not be written";

/// Run a command under a Redis lease, or inspect one.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version)]
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
        // Colour codes only for a person at a terminal, never in a log file or journal.
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(level);
    // A second initialisation cannot happen here; ignore the error rather than abort.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[derive(Debug, Subcommand)]
// Parsed once per process and moved once: boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Acquire the lease, run COMMAND under it, renew while it runs, release when it exits.
    ///
    /// If the lease is lost or becomes unknown (or a renewal cannot be confirmed before
    /// local validity ends), every process of the command gets SIGTERM, then SIGKILL at
    /// the end of --grace, which never extends past local validity; leasehold exits 124.
    #[command(after_help = RUN_EXIT_STATUS_HELP)]
    Run(run::RunArgs),
    /// Print whether the resource is held, the remaining TTL and the current fencing token
    /// (never an owner token).
    #[command(after_help = INSPECT_EXIT_STATUS_HELP)]
    Inspect(inspect::InspectArgs),
    /// List the leases held in the namespace (every purpose, or --purpose): resource
    /// digest, holder, fencing token, remaining time. A bounded SCAN, on every primary of
    /// a Cluster; read only.
    #[command(after_help = LIST_EXIT_STATUS_HELP)]
    List(list::ListArgs),
    /// Check that Redis can hold leases for this user (connect, version, ACL: scripts,
    /// keys, PUBLISH, SUBSCRIBE) and say what its eviction, persistence and replicas mean
    /// for a held lease. It takes and releases a throwaway lease (purpose `doctor`).
    #[command(after_help = DOCTOR_EXIT_STATUS_HELP)]
    Doctor(doctor::DoctorArgs),
    /// Print the completion script for a shell on stdout, generated from leasehold's own
    /// options (the Debian package installs all three).
    ///
    /// Where a user's shell finds it: bash, ~/.local/share/bash-completion/completions/leasehold;
    /// zsh, a file _leasehold in a directory of $fpath (before compinit runs); fish,
    /// ~/.config/fish/completions/leasehold.fish.
    #[command(after_help = DOCS_EXIT_STATUS_HELP)]
    Completions(completions::CompletionsArgs),
    /// Print leasehold's manual page (roff) on stdout, or write every page (leasehold.1,
    /// leasehold-run.1, …) to a directory; generated from the options `--help` shows.
    #[command(after_help = DOCS_EXIT_STATUS_HELP)]
    Man(manual::ManArgs),
}

/// Prints one line on stderr and returns 125.
pub(crate) fn fail(message: impl std::fmt::Display) -> u8 {
    say::line(say::Level::Error, message);
    status::FAILED
}

/// clap's error as one line: the message, the items it lists (missing options), and its
/// tip; the usage block would only repeat `--help`. `takes_command`: the subcommand is
/// `run`, whose usual stray argument is a command not separated by `--`.
fn one_line(rendered: &str, takes_command: bool) -> String {
    let mut parts = Vec::new();
    for line in rendered.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more") {
            continue;
        }
        // clap's own tip for a stray argument speaks of `--` whatever the subcommand.
        if line.starts_with("tip: to pass") {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line).to_owned());
    }
    let mut text = parts.join(" ");
    if text.is_empty() {
        text = "invalid arguments".to_owned();
    }
    if takes_command && text.starts_with("unexpected argument") {
        text.push_str("; put the command after --");
    }
    format!("{text} (see --help)")
}

/// The subcommand the raw arguments name (the first word that is one), if any.
fn subcommand(args: &[std::ffi::OsString]) -> Option<&str> {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| ["run", "inspect", "list", "doctor", "completions", "man"].contains(a))
}

/// The command line's definition: the derive's, with the variables
/// ([`variables::with_variables`]) and `--ttl`'s help, which states a minimum that depends
/// on the settings, so it is set here rather than in the derive.
fn command_with_ttl_help(ttl_help: String) -> clap::Command {
    variables::with_variables(Cli::command())
        .mut_subcommand("run", |run| run.mut_arg("ttl", |ttl| ttl.help(ttl_help)))
}

/// The command line's definition as `parse` reads it: `--ttl`'s help under the
/// environment's settings.
pub(crate) fn command() -> clap::Command {
    command_with_ttl_help(ttl::help())
}

/// The command line's definition as the manual page and the completions describe it: the
/// parser's own, with `--ttl`'s minimum under the default settings rather than under the
/// environment of whoever generates them.
pub(crate) fn documented_command() -> clap::Command {
    command_with_ttl_help(ttl::documented_help())
}

/// Parses the command line; `--ttl`'s help states the minimum the environment's settings
/// allow.
fn parse(args: &[std::ffi::OsString]) -> Result<Cli, clap::Error> {
    let command = command();
    let args = inputs::negative_durations_attached(&command, args);
    let matches = command.try_get_matches_from(args)?;
    if let Some(("run", run)) = matches.subcommand() {
        variables::command_line_relations(run)?;
    }
    Cli::from_arg_matches(&matches)
}

/// clap's error as leasehold's one line: a value refused with a line of leasehold's own
/// (naming its option, the value and what is accepted) as that line, any other as
/// [`one_line`].
fn parse_error(e: &clap::Error, args: &[std::ffi::OsString], takes_command: bool) -> String {
    let own = std::error::Error::source(e).and_then(|s| s.downcast_ref::<durations::BadValue>());
    let line = match own {
        Some(line) => line.to_string(),
        None => one_line(&e.render().to_string(), takes_command),
    };
    // A value from a variable: say so, or the operator looks for a flag that is not there.
    match variables::refused_variable(e, args) {
        Some(var) => format!("{var}: {line}"),
        None => line,
    }
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = asks_for_json_logs(&args);
    if json {
        say::json_lines();
    }
    // clap would refuse a value that is not UTF-8 without naming its option.
    if let Err(message) = inputs::check_arguments(&args).and_then(|()| variables::check_text()) {
        return ExitCode::from(fail(message));
    }
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let takes_command = subcommand(&args) == Some("run");
            return ExitCode::from(fail(parse_error(&e, &args, takes_command)));
        }
    };
    if cli.log_format == LogFormat::Json {
        say::json_lines();
    }
    // The keeper is forked while leasehold has one thread (before logging and the async
    // runtime start any); the command inherits leasehold's environment but for a slot that
    // is not this run's.
    let keeper = match &cli.command {
        Command::Run(args) => match args.pid_namespace().map(|wanted| run_keeper(args, wanted)) {
            Err(message) => return ExitCode::from(fail(message)),
            Ok(Ok(keeper)) => Some(keeper),
            Ok(Err(keeper::StartError::Namespace(e))) => {
                return ExitCode::from(fail(format!("--pid-namespace require: {e}")));
            }
            Ok(Err(e)) => {
                return ExitCode::from(fail(format!("cannot start the process keeper: {e}")));
            }
        },
        Command::Inspect(_) | Command::List(_) | Command::Doctor(_) => None,
        // Text generated from the definitions: no Redis, no runtime, no keeper.
        Command::Completions(args) => return ExitCode::from(completions::print(args)),
        Command::Man(args) => return ExitCode::from(manual::man(args)),
    };
    // Likewise the throwaway namespace `doctor` tries: forked while there is one thread.
    let probe = matches!(cli.command, Command::Doctor(_)).then(keeper::probe_namespace);
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
        match (cli.command, keeper) {
            (Command::Run(args), Some(keeper)) => run::run(args, keeper).await,
            (Command::Run(_), None) => fail("internal error: no process keeper"),
            (Command::Inspect(args), _) => inspect::inspect(args).await,
            (Command::List(args), _) => list::list(args).await,
            (Command::Doctor(args), _) => doctor::doctor(args, probe.unwrap_or(Ok(None))).await,
            // Returned before the runtime started.
            (Command::Completions(_) | Command::Man(_), _) => status::FAILED,
        }
    });
    ExitCode::from(code)
}

/// Forks the keeper for `leasehold run` (see [`keeper`]). Call it while the process has one
/// thread.
fn run_keeper(
    args: &run::RunArgs,
    pid_namespace: keeper::PidNamespace,
) -> Result<keeper::Keeper, keeper::StartError> {
    // SAFETY: the caller's promise: one thread.
    unsafe { variables::forget_inherited_slot() };
    let Some((program, rest)) = args.command.split_first() else {
        return Err(
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command given").into(),
        );
    };
    keeper::Keeper::fork(keeper::Spec {
        program: program.clone(),
        args: rest.to_vec(),
        policy: keeper::Policy {
            grace: args.grace.map(keeper::nanos),
            kill_after: args.kill_after.map(keeper::nanos),
            leftovers: args.leftovers(),
        },
        pid_namespace,
        new_privileges: args.new_privileges(),
    })
}

/// Whether the raw arguments ask for JSON logs, for an error the parser raises before it
/// could say so.
fn asks_for_json_logs(args: &[std::ffi::OsString]) -> bool {
    // The command's own arguments are not leasehold's.
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let args = &args[..end];
    let flag = args.iter().position(|a| {
        a == "--log-format" || a.to_str().is_some_and(|a| a.starts_with("--log-format="))
    });
    match flag {
        Some(i) => {
            args[i] == "--log-format=json" || args.get(i + 1).is_some_and(|next| next == "json")
        }
        None => std::env::var_os(variables::LOG_FORMAT).is_some_and(|v| v == "json"),
    }
}
