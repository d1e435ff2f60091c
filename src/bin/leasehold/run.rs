//! `leasehold run`: a command under a lease.
//!
//! The lease is held by `run_under_lease`, whose lease actor renews it and cancels the
//! work the moment it is lost or unknown; the command itself runs under the keeper
//! ([`crate::keeper`]), a process forked before the async runtime started, which keeps
//! every descendant of the command in its tree, kills the tree at the lease's local
//! validity end on its own, and kills it when leasehold dies. The lease is released only
//! when nothing of the command is left.
//!
//! Phases: acquire (a forwarded signal abandons the run and releases whatever landed) →
//! check replicas → run the command ([`crate::supervise`]) → release → exit status.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use leasehold::runtime::{CancelPolicy, LeaseContext, LeaseRuntime, RunOutcome, RuntimeError};
use leasehold::{
    AcquireOutcome, HolderLabel, LeaseClient, LeaseRequest, OperationId, ReleaseOutcome,
};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::config::{self, Sourced};
use crate::diagnose::Server;
use crate::keeper::{Keeper, Leftovers, Signal};
use crate::recheck::Recheck;
use crate::replicas::{DEFAULT_REPLICA_WAIT, ReplicaPolicy, report_acquired};
use crate::signals::Signals;
use crate::supervise::{CommandEnd, Stopping, Work, supervise};
use crate::{Common, fail, status};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Lease time to live (100ms ..= 1h), renewed while the command runs.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = config::parse_ttl)]
    ttl: Duration,
    /// How long to wait for a held lease (0s ..= 1h; 0s: try once).
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = config::parse_wait)]
    wait: Duration,
    /// Renewal cadence [env: LEASEHOLD_RENEW_EVERY] [default: ttl/3]; must be less than
    /// ttl − drift − safety margin.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_renew_every)]
    renew_every: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command's processes are stopped (0s ..= 1h)
    /// [default: whatever local validity is left]; never extends past local validity, nor
    /// past one renewal period once Redis says the lease is gone.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_grace)]
    pub(crate) grace: Option<Duration>,
    /// Like timeout(1)'s -k: SIGKILL every process of the command if it has not ended this
    /// long after a forwarded HUP, INT, QUIT, TERM or ALRM (0s ..= 1h).
    #[arg(long, value_name = "DURATION", value_parser = config::parse_kill_after)]
    pub(crate) kill_after: Option<Duration>,
    /// When the command exits but processes it started still run, keep the lease (renewing)
    /// until they end, instead of stopping them.
    #[arg(long)]
    pub(crate) wait_for_descendants: bool,
    /// After acquiring, wait until N replicas (1 ..= 16) hold the lease (Redis WAIT), so a
    /// failover to one of them keeps it. Short of N by the end of --replica-wait, the lease
    /// is held all the same (WAIT never undoes a write) and the command runs — its writes
    /// are still fenced by LEASEHOLD_FENCING_TOKEN — with one line on stderr saying how
    /// many acknowledged; add --require-replicas to refuse instead.
    #[arg(long, value_name = "N", value_parser = config::parse_replicas, allow_negative_numbers = true)]
    replicas: Option<u32>,
    /// Longest wait for --replicas (1ms ..= 10s) [default: 1s]. It comes out of the lease's
    /// validity, so it must be less than ttl − drift budget − safety margin − renew-every.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = config::parse_replica_wait,
        requires = "replicas"
    )]
    replica_wait: Option<Duration>,
    /// Do not run the command unless --replicas replicas acknowledged the lease: release it
    /// and exit 125. For work that must not run twice even across a failover.
    #[arg(long, requires = "replicas")]
    require_replicas: bool,
    /// Admit up to N holders at once (1 ..= 64): a counted lease, of which each run holds
    /// one slot with a fencing token of its own. Every holder must give the same N (it is
    /// part of the lease's name) [default: 1].
    #[arg(long, value_name = "N", value_parser = config::parse_permits, allow_negative_numbers = true)]
    permits: Option<u16>,
    /// After this run's lease ends without a release (leasehold killed, partitioned or
    /// paused past its TTL), refuse every acquisition of the resource for this long more
    /// (1ms ..= 1h), so the command has time to notice and stop before another starts. A
    /// run that ends normally releases and skips it. Contenders are told it is a
    /// lock-delay, and with --wait wait it out [default: none].
    #[arg(long, value_name = "DURATION", value_parser = config::parse_lock_delay)]
    lock_delay: Option<Duration>,
    /// Who holds the lease, as `leasehold inspect` shows it [default: <hostname>:<pid>];
    /// public (never a secret), printable ASCII, no spaces, ≤ 64 bytes.
    #[arg(long, value_name = "LABEL", value_parser = config::parse_holder)]
    holder: Option<HolderLabel>,
    /// Operation id of this run [default: run-<pid>]; printable ASCII, no spaces, ≤ 128 bytes.
    #[arg(long, value_name = "ID")]
    operation_id: Option<String>,
    /// Exit status when the lease is held by someone else (flock's -E) [default: 75].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8))]
    conflict_exit_code: Option<u8>,
    /// Say nothing on stderr when the lease is held by someone else: for a fleet's cron
    /// jobs, whose losing hosts would otherwise mail the operator every night.
    #[arg(long)]
    quiet: bool,
    /// Serve Prometheus metrics (text format) on this address while the command runs,
    /// e.g. 127.0.0.1:9464 or localhost:9464.
    #[arg(long, value_name = "HOST:PORT", value_parser = config::parse_socket_addr)]
    metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<std::ffi::OsString>,
}

impl RunArgs {
    pub(crate) fn leftovers(&self) -> Leftovers {
        if self.wait_for_descendants {
            Leftovers::Wait
        } else {
            Leftovers::Stop
        }
    }
}

/// What the work under the lease hands out once the lease is held: its context, the lease
/// actor's span, and the sender whose drop ends the work (and so releases the lease).
type Held = (LeaseContext, tracing::Span, oneshot::Sender<()>);

/// How long leasehold waits for the keeper to exit once its work is over (it exits as soon
/// as nothing of the command is left; this only bounds a process stuck in the kernel).
const KEEPER_EXIT_LIMIT: Duration = Duration::from_secs(10);

/// Everything `run` needs before it talks to Redis, checked.
struct Plan {
    client: LeaseClient,
    server: Server,
    request: LeaseRequest,
    replicas: Option<ReplicaPolicy>,
}

fn plan(args: &RunArgs) -> Result<Plan, String> {
    let renew_every = args.renew_every.map(|d| Sourced::flag("--renew-every", d));
    let (client, server) = args.common.client(renew_every)?;
    let operation = args
        .operation_id
        .clone()
        .unwrap_or_else(|| format!("run-{}", std::process::id()));
    let attempt = OperationId::new(&operation)
        .and_then(leasehold::Attempt::new)
        .map_err(|e| config::option_error(&e))?;
    let replicas = args.replicas.map(|wanted| ReplicaPolicy {
        wanted,
        wait: args.replica_wait.unwrap_or(DEFAULT_REPLICA_WAIT),
        required: args.require_replicas,
    });
    let mut builder = LeaseRequest::builder(
        args.common.purpose().clone(),
        args.common.resource()?,
        attempt,
    )
    .ttl(args.ttl)
    .wait_timeout(args.wait)
    .permits(u32::from(args.permits.unwrap_or(1)));
    if let Some(delay) = args.lock_delay {
        builder = builder.lock_delay(delay);
    }
    if let Some(holder) = args.holder.clone().or_else(config::default_holder) {
        builder = builder.holder(holder);
    }
    if let Some(policy) = replicas {
        builder = builder.wait_for_replicas(policy.wanted, policy.wait);
    }
    let request = builder.build().map_err(|e| config::option_error(&e))?;
    Ok(Plan {
        client,
        server,
        request,
        replicas,
    })
}

pub(crate) async fn run(args: RunArgs, keeper: Keeper) -> u8 {
    let mut keeper = match keeper.connect() {
        Ok(link) => link,
        Err(e) => return fail(format!("cannot talk to the process keeper: {e}")),
    };
    let code = run_linked(args, &mut keeper).await;
    keeper.finish(KEEPER_EXIT_LIMIT).await;
    code
}

async fn run_linked(args: RunArgs, keeper: &mut crate::keeper::KeeperLink) -> u8 {
    let plan = match plan(&args) {
        Ok(plan) => plan,
        Err(message) => return fail(message),
    };
    // Before anything reaches Redis: from here on no forwarded signal can kill leasehold.
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot install signal handlers: {e}")),
    };
    if let Some(addr) = args.metrics_addr {
        let exporter = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install();
        if let Err(e) = exporter {
            return fail(format!("--metrics-addr {addr}: {e}"));
        }
    }
    let Plan {
        client,
        server,
        request,
        replicas,
    } = plan;
    let contention = Contention {
        exit_code: args.conflict_exit_code,
        quiet: args.quiet,
    };
    let stopping = Stopping {
        leftovers: args.leftovers(),
        grace: args.grace,
        renew_every: client.settings().renew_every(args.ttl),
    };
    let runtime = LeaseRuntime::new(client.clone()).with_max_leases(1);
    // The work under the lease hands its context out and ends when told (by dropping
    // `done`): the command is supervised here, in one task with the signals and the keeper.
    // The lease actor's span comes along, so leasehold's events about the command carry
    // the lease's purpose, digest, operation id and token.
    let (held_tx, mut held_rx) = oneshot::channel::<Held>();
    // NotifyOnly: the work is the command's tree, which `supervise` kills itself when it
    // must be gone and only then ends the work, so the release never precedes that kill.
    let work = runtime.run_under_lease(&request, CancelPolicy::NotifyOnly, move |ctx| async move {
        let (done_tx, done_rx) = oneshot::channel::<()>();
        if held_tx
            .send((ctx, tracing::Span::current(), done_tx))
            .is_ok()
        {
            let _ = done_rx.await;
        }
    });
    let mut work: Work<'_> = Box::pin(work);

    // Acquire.
    let (mut ctx, span, done) = tokio::select! {
        biased;
        outcome = work.as_mut() => return not_run(outcome, &client, &server, &request, contention).await,
        held = &mut held_rx => match held {
            Ok(held) => held,
            Err(_) => return not_run(work.await, &client, &server, &request, contention).await,
        },
        Some(signal) = signals.recv() => {
            // Whatever the acquisition did (it may have landed), the attempt's release
            // undoes it; a lease actor that had just started ends with its work.
            drop(work);
            let release = client
                .release_attempt(request.purpose(), request.resource(), request.attempt())
                .await;
            say!("{} before the command started; release: {}",
                signal.name(),
                release.as_str()
            );
            return signal_status(signal);
        }
    };

    // Check replicas, and a signal that came with the lease.
    let refusal = span.in_scope(|| report_acquired(&ctx, replicas));
    let early_signal = signals.try_recv();
    if refusal.is_some() || early_signal.is_some() {
        drop(done);
        let release = match work.await {
            Ok(RunOutcome::Ran { report, .. }) => report.release.as_str(),
            _ => "unknown",
        };
        return match (early_signal, refusal) {
            (Some(signal), _) => {
                say!(
                    "{} before the command started; release: {release}",
                    signal.name()
                );
                signal_status(signal)
            }
            (None, Some(shortfall)) => fail(format!(
                "{shortfall}; the command was not run (--require-replicas); release: {release}"
            )),
            (None, None) => status::FAILED,
        };
    }

    // Run the command until nothing of it is left.
    let mut work_done = None;
    let end = supervise(
        &mut ctx,
        keeper,
        &mut signals,
        stopping,
        Recheck {
            client: &client,
            request: &request,
        },
        &mut work,
        &mut work_done,
    )
    .instrument(span)
    .await;
    drop(done);
    let outcome = match work_done {
        Some(outcome) => outcome,
        None => work.await,
    };
    if let Ok(RunOutcome::Ran { report, .. }) = &outcome {
        report_release(&report.release, &server);
    }
    exit_status(end, outcome, args.leftovers(), &args.command)
}

/// One line when the lease was not given back cleanly: it stays held until its TTL ends,
/// so the next holder waits that long.
fn report_release(release: &ReleaseOutcome, server: &Server) {
    let detail = match release {
        ReleaseOutcome::Released | ReleaseOutcome::AlreadyAbsent | ReleaseOutcome::NotOwner => {
            return;
        }
        ReleaseOutcome::Unavailable { detail } | ReleaseOutcome::Indeterminate { detail } => detail,
    };
    say!(
        "the lease was not released ({}); it stays held until its TTL ends",
        server.explain(detail)
    );
}

/// The run ended without the command: not acquired, or the lease ended before it started.
/// What to do when someone else holds the lease (`--conflict-exit-code`, `--quiet`).
#[derive(Debug, Clone, Copy)]
struct Contention {
    exit_code: Option<u8>,
    quiet: bool,
}

async fn not_run(
    outcome: Result<RunOutcome<()>, RuntimeError>,
    client: &LeaseClient,
    server: &Server,
    request: &LeaseRequest,
    contention: Contention,
) -> u8 {
    match outcome {
        Err(RuntimeError::Invalid(e)) => fail(config::option_error(&e)),
        Err(e) => fail(e),
        Ok(RunOutcome::NotAcquired(outcome)) => match outcome {
            AcquireOutcome::Contended { retry_after }
            | AcquireOutcome::OwnerOperationConflict { retry_after } => {
                if !contention.quiet {
                    say!(
                        "the lease is held by someone else (it ends in {} unless renewed)",
                        humantime::format_duration(retry_after)
                    );
                }
                contention.exit_code.unwrap_or(status::NOT_ACQUIRED)
            }
            AcquireOutcome::LockDelayed { retry_after } => {
                if !contention.quiet {
                    say!(
                        "the lease is in its lock-delay: its last holder's ended without a \
                         release, and it refuses holders for {} more",
                        humantime::format_duration(retry_after)
                    );
                }
                contention.exit_code.unwrap_or(status::NOT_ACQUIRED)
            }
            AcquireOutcome::Unavailable { detail } => fail(server.explain(&detail)),
            AcquireOutcome::Indeterminate { attempt, detail } => {
                // The acquisition may have landed: give it back rather than leave it held.
                let release = client
                    .release_attempt(request.purpose(), request.resource(), &attempt)
                    .await;
                fail(format!(
                    "acquisition never confirmed ({}); release: {}",
                    server.explain(&detail),
                    release.as_str()
                ))
            }
            AcquireOutcome::Acquired(_) | AcquireOutcome::Replayed(_) => {
                fail("internal error: acquired lease reported as not acquired")
            }
        },
        Ok(RunOutcome::Ran { report, .. }) => fail(format!(
            "the lease ended before the command started ({}); release: {}",
            report
                .cancelled
                .map_or_else(|| report.end.as_str().to_owned(), |c| c.reason.to_string()),
            report.release.as_str()
        )),
    }
}

/// 128 + N, as a shell reports a process a signal ended.
fn signal_status(signal: Signal) -> u8 {
    u8::try_from(128 + signal.raw()).unwrap_or(status::FAILED)
}

fn exit_status(
    end: CommandEnd,
    outcome: Result<RunOutcome<()>, RuntimeError>,
    leftovers: Leftovers,
    command: &[std::ffi::OsString],
) -> u8 {
    let report = match outcome {
        Ok(RunOutcome::Ran { report, .. }) => Some(report),
        _ => None,
    };
    let release = report.as_ref().map_or("unknown", |r| r.release.as_str());
    match end {
        CommandEnd::NotStarted(e) => {
            let program = command
                .first()
                .map_or_else(String::new, |p| p.to_string_lossy().into_owned());
            say!("cannot run the command: {program}: {e}");
            if e.kind() == std::io::ErrorKind::NotFound {
                status::NOT_FOUND
            } else {
                status::CANNOT_EXECUTE
            }
        }
        CommandEnd::KeeperDied { killed } => fail(format!(
            "the process keeper died; {killed} process(es) of the command killed; release: \
             {release}"
        )),
        CommandEnd::Gone {
            status,
            lost_before_exit,
            lost_before_gone,
        } => {
            let cut_short = lost_before_exit || (lost_before_gone && leftovers == Leftovers::Wait);
            match status {
                Some(status) if !cut_short => {
                    if lost_before_gone {
                        say!("the lease was lost after the command exited");
                    }
                    exit_code(status)
                }
                _ => {
                    let reason = report
                        .as_ref()
                        .and_then(|r| r.cancelled.as_ref())
                        .map_or_else(
                            || "could not be vouched for".to_owned(),
                            |c| format!("{} (token {})", c.reason, c.token),
                        );
                    say!("lease {reason}; the command was stopped");
                    status::LEASE_LOST
                }
            }
        }
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(status::FAILED),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(status::FAILED),
        (None, None) => status::FAILED,
    }
}
