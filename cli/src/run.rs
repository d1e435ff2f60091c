//! `leasehold run`: a command under a lease.
//!
//! The lease is held by `run_under_lease`, whose lease actor renews it and cancels the
//! work the moment it is lost or unknown; the command itself runs under the keeper
//! ([`crate::keeper`]), a process forked before the async runtime started, which keeps
//! every descendant of the command in its tree, kills the tree at the lease's local
//! validity end on its own, and kills it when leasehold dies. The lease is released only
//! when nothing of the command is left.
//!
//! Phases: acquire ([`crate::acquire`]: a try, then a wait that names the holder; a
//! forwarded signal abandons the run and releases whatever landed) → check replicas → run
//! the command ([`crate::supervise`]; `--timeout` sends its signal as a forwarded one) →
//! release → exit status. The options it reads are in `args`.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use leasehold::protocol::LeaseRequestBuilder;
use leasehold::runtime::{LeaseRuntime, RunOutcome, RuntimeError};
use leasehold::{LeaseClient, LeaseRequest, OperationId, ReleaseOutcome};
use tracing::Instrument as _;

use crate::acquire::{Acquire, Acquisition, Contention, Held, signal_status};
use crate::config::{self, Sourced};
use crate::diagnose::Server;
use crate::keeper::{Keeper, Leftovers, Signal};
use crate::recheck::Recheck;
use crate::replicas::{DEFAULT_REPLICA_WAIT, ReplicaPolicy, Shortfall, report_acquired};
use crate::signals::Signals;
use crate::supervise::{CommandEnd, Stopping, supervise};
use crate::{fail, status, ttl};

mod args;

pub(crate) use args::RunArgs;

/// How long leasehold waits for the keeper to exit once its work is over (it exits as soon
/// as nothing of the command is left; this only bounds a process stuck in the kernel).
const KEEPER_EXIT_LIMIT: Duration = Duration::from_secs(10);

/// Everything `run` needs before it talks to Redis, checked.
struct Plan {
    client: LeaseClient,
    server: Server,
    /// The request but for its wait, which the acquisition sets per stage.
    builder: LeaseRequestBuilder,
    replicas: Option<ReplicaPolicy>,
}

fn plan(args: &RunArgs) -> Result<Plan, String> {
    let renew_every = args.renew_every.map(|d| Sourced::flag("--renew-every", d));
    let (client, server) = args.common.client(renew_every)?;
    // The TTL's one minimum, before the request's own bounds would name the fixed 100 ms.
    let ttl = args.ttl.unwrap_or(ttl::DEFAULT);
    let cadence = match (
        args.renew_every,
        std::env::var_os(crate::variables::RENEW_EVERY),
    ) {
        (Some(_), _) => ttl::Cadence::Flag,
        (None, Some(_)) => ttl::Cadence::Variable,
        (None, None) => ttl::Cadence::Default,
    };
    ttl::check(client.settings(), ttl, args.ttl.is_some(), cadence)?;
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
    .ttl(ttl)
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
    // Every bound and relation, checked once here: the stages only change the wait.
    let request = builder
        .clone()
        .wait_timeout(args.wait())
        .build()
        .map_err(|e| config::option_error(&e))?;
    let defaulted: &[&str] = match args.replica_wait {
        Some(_) => &[],
        None => &["replica_wait"],
    };
    client
        .settings()
        .check_request(&request)
        .map_err(|e| config::option_error_with(&e, defaulted))?;
    Ok(Plan {
        client,
        server,
        builder,
        replicas,
    })
}

pub(crate) async fn run(args: RunArgs, keeper: Keeper) -> u8 {
    if let (containment, Some(refusal)) = keeper.containment() {
        tracing::debug!(
            process_tree = containment.describe(),
            "no PID namespace for the command: {refusal}"
        );
    }
    let mut keeper = match keeper.connect() {
        Ok(link) => link,
        Err(e) => return fail(format!("cannot talk to the process keeper: {e}")),
    };
    let code = run_linked(args, &mut keeper).await;
    keeper.finish(KEEPER_EXIT_LIMIT).await;
    code
}

async fn run_linked(args: RunArgs, keeper: &mut crate::keeper::KeeperLink) -> u8 {
    let (plan, mut signals) = match prepare(&args) {
        Ok(prepared) => prepared,
        Err(message) => return fail(message),
    };
    let runtime = LeaseRuntime::new(plan.client.clone()).with_max_leases(1);
    let acquire = Acquire {
        runtime: &runtime,
        client: &plan.client,
        server: &plan.server,
        builder: &plan.builder,
        wait: args.wait(),
        contention: Contention {
            exit_code: args.conflict_exit_code,
            quiet: args.quiet,
        },
    };
    let held = match acquire.acquire(&mut signals).await {
        Acquisition::Held(held) => held,
        Acquisition::NotRun(code) => return code,
    };
    // Check replicas, and a signal that came with the lease.
    let refusal = held
        .span
        .in_scope(|| report_acquired(&held.ctx, plan.replicas));
    let early_signal = signals.try_recv();
    if refusal.is_some() || early_signal.is_some() {
        return not_started(held, early_signal, refusal).await;
    }
    run_command(&args, &plan, held, keeper, signals).await
}

/// Everything checked and set up before anything reaches Redis: the plan, the signal
/// handlers (from here on no forwarded signal can kill leasehold) and the exporter.
fn prepare(args: &RunArgs) -> Result<(Plan, Signals), String> {
    let plan = plan(args)?;
    let signals = Signals::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    if let Some(addr) = args.metrics_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
    }
    Ok((plan, signals))
}

/// The lease is held but the command is not started (a signal came with the lease, or too
/// few replicas acknowledged it): the lease is released and the status says why.
async fn not_started(held: Held, early_signal: Option<Signal>, refusal: Option<Shortfall>) -> u8 {
    drop(held.done);
    let release = match held.work.await {
        Ok(RunOutcome::Ran { report, .. }) => report.release.as_str(),
        _ => "unknown",
    };
    match (early_signal, refusal) {
        (Some(signal), _) => {
            say!(
                "{} before the command started; release of the lease just acquired: \
                 {release}",
                signal.name()
            );
            signal_status(signal)
        }
        (None, Some(shortfall)) => fail(format!(
            "{shortfall}; the command was not run (--require-replicas); release: {release}"
        )),
        (None, None) => status::FAILED,
    }
}

/// The command run under the held lease until nothing of it is left (`--timeout` counts
/// from its start), the lease released after, and leasehold's exit status.
async fn run_command(
    args: &RunArgs,
    plan: &Plan,
    held: Held,
    keeper: &mut crate::keeper::KeeperLink,
    mut signals: Signals,
) -> u8 {
    let Held {
        mut ctx,
        span,
        done,
        work,
        request,
    } = held;
    let stopping = Stopping {
        leftovers: args.leftovers(),
        grace: args.grace,
        renew_every: plan
            .client
            .settings()
            .renewal_cadence(args.ttl.unwrap_or(ttl::DEFAULT)),
    };
    if let Some(after) = args.timeout {
        signals.time_out(after, args.signal.unwrap_or(Signal::Term));
    }
    let (end, work) = supervise(
        &mut ctx,
        keeper,
        &mut signals,
        stopping,
        Recheck {
            client: &plan.client,
            request: &request,
        },
        work,
    )
    .instrument(span)
    .await;
    if let CommandEnd::Survived { pid } = end {
        // Released, the lease would let another holder start beside a process of this
        // one; kept (no longer renewed), it ends at its TTL.
        say!(
            "process {pid} of the command still runs and leasehold cannot stop it; the lease \
             is not released: it stays held until its TTL ends"
        );
        std::process::exit(i32::from(status::NOT_STOPPED));
    }
    drop(done);
    let outcome = work.outcome().await;
    if let Ok(RunOutcome::Ran { report, .. }) = &outcome {
        report_release(&report.release, &plan.server);
    }
    let ended = Ended {
        leftovers: args.leftovers(),
        timed_out: signals.timed_out(),
    };
    exit_status(end, outcome, ended, &args.command)
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

/// How the run under the lease ended, besides the command's own status.
#[derive(Debug, Clone, Copy)]
struct Ended {
    leftovers: Leftovers,
    /// --timeout ran out before nothing of the command was left.
    timed_out: bool,
}

fn exit_status(
    end: CommandEnd,
    outcome: Result<RunOutcome<()>, RuntimeError>,
    ended: Ended,
    command: &[std::ffi::OsString],
) -> u8 {
    let report = match outcome {
        Ok(RunOutcome::Ran { report, .. }) => Some(report),
        _ => None,
    };
    let release = report.as_ref().map_or("unknown", |r| r.release.as_str());
    match end {
        CommandEnd::NotStarted { errno } => {
            let e = std::io::Error::from_raw_os_error(errno);
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
        CommandEnd::Unarmed(unarmed) => fail(format!(
            "{unarmed}; the command was not started; release: {release}"
        )),
        // Handled before the release, which it skips.
        CommandEnd::Survived { .. } => status::NOT_STOPPED,
        CommandEnd::Gone {
            refused: Some(_), ..
        } => status::NOT_STOPPED,
        CommandEnd::KeeperDied { killed } => fail(format!(
            "the process keeper died; {killed} process(es) of the command killed; release: \
             {release}"
        )),
        CommandEnd::Gone {
            status,
            lost_before_exit,
            lost_before_gone,
            refused: None,
        } => {
            let cut_short =
                lost_before_exit || (lost_before_gone && ended.leftovers == Leftovers::Wait);
            match status {
                // timeout(1)'s status: the command did not end within its time.
                Some(_) if !cut_short && ended.timed_out => status::TIMED_OUT,
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
