//! `leasehold run`: a command under a lease.
//!
//! The command runs in its own process group inside `run_under_lease`, so the LeaseActor
//! renews the lease while it runs and releases it the moment it exits. On cancellation the
//! group gets SIGTERM, then SIGKILL at `min(now + grace, local validity end)`; if leasehold
//! itself is ever late (paused by SIGSTOP, starved), the LeaseActor's Kill policy drops this
//! future at validity end and the drop guard SIGKILLs the group.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use leasehold::runtime::{CancelPolicy, LeaseContext, LeaseRuntime, RunOutcome, RuntimeError};
use leasehold::{AcquireOutcome, FailureDetail, LeaseRequest, OperationId, Replication};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::{
    Common, fail, option_error, parse_any, parse_replica_wait, parse_replicas, parse_ttl,
    parse_wait, status,
};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Lease time to live (100ms ..= 1h), renewed while the command runs.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_ttl)]
    ttl: Duration,
    /// How long to wait for a held lease (0s: try once).
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = parse_wait)]
    wait: Duration,
    /// Renewal cadence [default: ttl/3]; must be less than ttl − drift − safety margin.
    #[arg(long, value_name = "DURATION", value_parser = parse_any)]
    renew_every: Option<Duration>,
    /// Time between SIGTERM and SIGKILL after the lease is lost [default: whatever local
    /// validity is left]; never extends past local validity.
    #[arg(long, value_name = "DURATION", value_parser = parse_any)]
    grace: Option<Duration>,
    /// After acquiring, wait until N replicas (1 ..= 16) hold the lease (Redis WAIT), so a
    /// failover to one of them keeps it. Short of N by the end of --replica-wait, the lease
    /// is held all the same (WAIT never undoes a write) and the command runs — its writes
    /// are still fenced by LEASEHOLD_FENCING_TOKEN — with one line on stderr saying how
    /// many acknowledged; add --require-replicas to refuse instead.
    #[arg(long, value_name = "N", value_parser = parse_replicas, allow_negative_numbers = true)]
    replicas: Option<u32>,
    /// Longest wait for --replicas (1ms ..= 10s) [default: 1s]. It comes out of the lease's
    /// validity, so it must be less than ttl − drift budget − safety margin − renew-every.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_replica_wait,
        requires = "replicas"
    )]
    replica_wait: Option<Duration>,
    /// Do not run the command unless --replicas replicas acknowledged the lease: release it
    /// and exit 125. For work that must not run twice even across a failover.
    #[arg(long, requires = "replicas")]
    require_replicas: bool,
    /// Operation id of this run [default: run-<pid>]; printable ASCII, no spaces, ≤ 128 bytes.
    #[arg(long, value_name = "ID")]
    operation_id: Option<String>,
    /// Serve Prometheus metrics (text format) on this address while the command runs,
    /// e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// `--replica-wait` when `--replicas` is given without it: long enough for a replica on a
/// loaded network to answer (a healthy one acknowledges within milliseconds, since `WAIT`
/// asks the replicas at once), short enough to fit the default 30 s TTL many times over.
const DEFAULT_REPLICA_WAIT: Duration = Duration::from_secs(1);

/// What the command asked of replicas (`--replicas`, `--replica-wait`, `--require-replicas`).
#[derive(Debug, Clone, Copy)]
struct ReplicaPolicy {
    wanted: u32,
    wait: Duration,
    /// Refuse to run the command on a shortfall.
    required: bool,
}

/// Why an acquisition is not known to be on the replicas asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Shortfall {
    /// `WAIT` answered with fewer than asked for.
    #[error("{acked} of {wanted} replicas acknowledged the lease within {}", humantime::format_duration(*.wait))]
    Acknowledged {
        acked: u32,
        wanted: u32,
        wait: Duration,
    },
    /// A replay confirmed the lease; it writes nothing, so nothing was waited for.
    #[error("the lease was confirmed by a replay, which waits for no replica")]
    NotWaited,
    /// `WAIT` did not answer.
    #[error("the wait for replicas did not answer ({0})")]
    Unknown(FailureDetail),
    /// A report this version of the CLI does not know: not counted as acknowledged.
    #[error("replication {0}")]
    Other(&'static str),
}

impl ReplicaPolicy {
    /// The shortfall of `replication` against this policy, if any.
    fn shortfall(&self, replication: &Replication) -> Option<Shortfall> {
        match replication {
            Replication::Acknowledged { acked, wanted } if acked < wanted => {
                Some(Shortfall::Acknowledged {
                    acked: *acked,
                    wanted: *wanted,
                    wait: self.wait,
                })
            }
            Replication::Acknowledged { .. } => None,
            Replication::NotWaited => Some(Shortfall::NotWaited),
            Replication::Unknown { detail } => Some(Shortfall::Unknown(detail.clone())),
            other => Some(Shortfall::Other(other.as_str())),
        }
    }
}

/// How the command ended, as the work under the lease saw it.
enum ChildEnd {
    /// It exited; `stopped` says whether leasehold had signalled it for a lost lease.
    Exited { status: ExitStatus, stopped: bool },
    /// It could not be started.
    NotStarted(std::io::ErrorKind, String),
    /// It was not started: `--require-replicas` and the replicas fell short.
    Refused(Shortfall),
}

pub(crate) async fn run(args: RunArgs) -> u8 {
    if let Some(addr) = args.metrics_addr {
        let exporter = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install();
        if let Err(e) = exporter {
            return fail(format!("--metrics-addr {addr}: {e}"));
        }
    }
    let renew_every = args.renew_every;
    let client = match args.common.client(|s| match renew_every {
        Some(every) => s.with_renew_every(every),
        None => s,
    }) {
        Ok(c) => c,
        Err(e) => return fail(option_error(&e)),
    };
    let operation = args
        .operation_id
        .clone()
        .unwrap_or_else(|| format!("run-{}", std::process::id()));
    let attempt = match OperationId::new(&operation).and_then(leasehold::Attempt::new) {
        Ok(a) => a,
        Err(e) => return fail(option_error(&e)),
    };
    let resource = args.common.resource();
    let replicas = args.replicas.map(|wanted| ReplicaPolicy {
        wanted,
        wait: args.replica_wait.unwrap_or(DEFAULT_REPLICA_WAIT),
        required: args.require_replicas,
    });
    let mut builder = LeaseRequest::builder(args.common.purpose().clone(), resource, attempt)
        .ttl(args.ttl)
        .wait_timeout(args.wait);
    if let Some(policy) = replicas {
        builder = builder.wait_for_replicas(policy.wanted, policy.wait);
    }
    let request = match builder.build() {
        Ok(r) => r,
        Err(e) => return fail(option_error(&e)),
    };
    let runtime = LeaseRuntime::new(client.clone()).with_max_leases(1);
    let (command, grace) = (args.command, args.grace);
    let outcome = runtime
        .run_under_lease(&request, CancelPolicy::Kill, move |ctx| {
            supervise(ctx, command, grace, replicas)
        })
        .await;
    match outcome {
        Err(RuntimeError::Invalid(e)) => fail(option_error(&e)),
        Err(e) => fail(e),
        Ok(RunOutcome::NotAcquired(outcome)) => match outcome {
            AcquireOutcome::Contended { retry_after }
            | AcquireOutcome::OwnerOperationConflict { retry_after } => {
                eprintln!(
                    "leasehold: the lease is held by someone else (it ends in {} unless renewed)",
                    humantime::format_duration(retry_after)
                );
                status::NOT_ACQUIRED
            }
            AcquireOutcome::Unavailable { detail } => fail(format!("redis unavailable: {detail}")),
            AcquireOutcome::Indeterminate { attempt, detail } => {
                // The acquisition may have landed: give it back rather than leave it held.
                let release = client
                    .release_attempt(request.purpose(), request.resource(), &attempt)
                    .await;
                fail(format!(
                    "acquisition never confirmed ({detail}); release: {}",
                    release.as_str()
                ))
            }
            AcquireOutcome::Acquired(_) | AcquireOutcome::Replayed(_) => {
                fail("internal error: acquired lease reported as not acquired")
            }
        },
        Ok(RunOutcome::Ran { output, report }) => match (output, report.cancelled) {
            (Some(ChildEnd::Refused(shortfall)), _) => fail(format!(
                "{shortfall}; the command was not run (--require-replicas); release: {}",
                report.release.as_str()
            )),
            (Some(ChildEnd::NotStarted(kind, message)), _) => {
                eprintln!("leasehold: cannot run the command: {message}");
                if kind == std::io::ErrorKind::NotFound {
                    status::NOT_FOUND
                } else {
                    status::CANNOT_EXECUTE
                }
            }
            (Some(ChildEnd::Exited { status, stopped }), cancelled) if !stopped => {
                if cancelled.is_some() {
                    // It ended on its own just as the lease went: its status stands.
                    eprintln!("leasehold: the command exited as the lease was lost");
                }
                exit_code(status)
            }
            (_, Some(c)) => {
                eprintln!(
                    "leasehold: lease {}; the command was stopped (token {})",
                    c.reason, c.token
                );
                status::LEASE_LOST
            }
            (Some(ChildEnd::Exited { .. }), None) | (None, None) => fail(format!(
                "the command ended abnormally ({})",
                report.end.as_str()
            )),
        },
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(status::FAILED),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(status::FAILED),
        (None, None) => status::FAILED,
    }
}

/// Sends `signal` to the process group `pgid`.
fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; it reads no memory.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// SIGKILLs the command's process group if the work is dropped before the command exited
/// (the LeaseActor's Kill policy at validity end): work never outlives the lease.
struct KillGroupOnDrop {
    pgid: i32,
    armed: bool,
}

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, libc::SIGKILL);
        }
    }
}

/// Reports the acquisition: one `lease acquired` event (INFO) with the replica counts for
/// the JSON logs, and — if replicas were asked for and fell short — one line on stderr.
/// Returns the shortfall if the command must not run.
fn report_acquired(ctx: &LeaseContext, replicas: Option<ReplicaPolicy>) -> Option<Shortfall> {
    let replication = ctx.replication();
    let acked = match replication {
        Replication::Acknowledged { acked, .. } => Some(*acked),
        _ => None,
    };
    // Inside the lease actor's span, which carries purpose, digest and operation id.
    tracing::info!(
        token = ctx.token().get(),
        replication = replication.as_str(),
        replicas_acked = acked,
        replicas_wanted = replicas.map(|p| p.wanted),
        "lease acquired"
    );
    let policy = replicas?;
    let shortfall = policy.shortfall(replication)?;
    if policy.required {
        return Some(shortfall);
    }
    eprintln!(
        "leasehold: {shortfall}; running the command anyway (a failover now can lose the \
         lease; --require-replicas refuses)"
    );
    None
}

async fn supervise(
    ctx: LeaseContext,
    command: Vec<String>,
    grace: Option<Duration>,
    replicas: Option<ReplicaPolicy>,
) -> ChildEnd {
    if let Some(shortfall) = report_acquired(&ctx, replicas) {
        return ChildEnd::Refused(shortfall);
    }
    let Some((program, rest)) = command.split_first() else {
        return ChildEnd::NotStarted(std::io::ErrorKind::InvalidInput, "empty command".into());
    };
    // Handlers before the command exists: a signal that arrives the moment it starts must
    // be forwarded, not kill leasehold and leave the command running unsupervised.
    let (mut interrupts, mut terminations) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (Some(i), Some(t)),
        _ => (None, None),
    };
    let mut child = match tokio::process::Command::new(program)
        .args(rest)
        .env("LEASEHOLD_FENCING_TOKEN", ctx.token().to_string())
        // Its own process group, so a lost lease stops everything it started.
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return ChildEnd::NotStarted(e.kind(), format!("{program}: {e}")),
    };
    let Some(pgid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        let status = child.wait().await;
        return match status {
            Ok(status) => ChildEnd::Exited {
                status,
                stopped: false,
            },
            Err(e) => ChildEnd::NotStarted(e.kind(), e.to_string()),
        };
    };
    let mut guard = KillGroupOnDrop { pgid, armed: true };
    let mut kill_at: Option<Instant> = None;
    loop {
        tokio::select! {
            status = child.wait() => {
                guard.armed = false;
                return match status {
                    Ok(status) => ChildEnd::Exited { status, stopped: kill_at.is_some() },
                    Err(e) => ChildEnd::NotStarted(e.kind(), e.to_string()),
                };
            }
            () = ctx.cancelled(), if kill_at.is_none() => {
                let stop_by = ctx.stop_by();
                let at = grace.map_or(stop_by, |g| (Instant::now() + g).min(stop_by));
                eprintln!(
                    "leasehold: lease {}; sending SIGTERM to the command, SIGKILL in {}",
                    ctx.cancel_reason().map_or("ended".to_owned(), |r| r.to_string()),
                    humantime::format_duration(round_ms(at.saturating_duration_since(Instant::now())))
                );
                signal_group(pgid, libc::SIGTERM);
                kill_at = Some(at);
            }
            () = sleep_until_opt(kill_at) => {
                signal_group(pgid, libc::SIGKILL);
                // Keep waiting for the exit; no second SIGKILL needed.
                kill_at = Some(far_future());
            }
            Some(()) = recv_opt(&mut interrupts) => signal_group(pgid, libc::SIGINT),
            Some(()) = recv_opt(&mut terminations) => signal_group(pgid, libc::SIGTERM),
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn recv_opt(stream: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match stream {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
