//! docs/design.md §8 on `MemoryBackend` under paused tokio time: renewal cadence, cancellation on
//! LOST / UNKNOWN / unconfirmable renewal, the Kill and NotifyOnly policies, and the
//! supervision grid — worker {exits, errs, panics, ignores cancel} × lease {held, lost,
//! unknown, validity ends}, each asserting the release and exactly one `LeaseCancelled`.

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(3);
const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnCancel {
    Exit,
    Ignore,
}

#[derive(Debug)]
enum Event {
    Started,
    Cancelled(LeaseCancelled, Instant),
    Stopped,
}

struct Worker;

struct WorkerArgs {
    on_cancel: OnCancel,
    events: mpsc::UnboundedSender<Event>,
}

#[derive(Debug)]
enum WorkerMsg {
    Cancelled(LeaseCancelled),
    Exit,
    Fail,
    Panic,
}

impl From<LeaseCancelled> for WorkerMsg {
    fn from(c: LeaseCancelled) -> Self {
        Self::Cancelled(c)
    }
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = WorkerArgs;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        args: WorkerArgs,
    ) -> Result<WorkerArgs, ActorProcessingErr> {
        let _ = args.events.send(Event::Started);
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Cancelled(c) => {
                let _ = state.events.send(Event::Cancelled(c, Instant::now()));
                if state.on_cancel == OnCancel::Exit {
                    myself.stop(None);
                }
            }
            WorkerMsg::Exit => myself.stop(None),
            WorkerMsg::Fail => return Err("job failed".into()),
            WorkerMsg::Panic => panic!("job panicked"),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<WorkerMsg>,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let _ = state.events.send(Event::Stopped);
        Ok(())
    }
}

struct Setup {
    backend: MemoryBackend,
    runtime: LeaseRuntime,
}

fn setup() -> Setup {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    Setup {
        backend,
        runtime: LeaseRuntime::new(client),
    }
}

fn request(s: &Setup, resource: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("job").unwrap(),
        ResourceDigest::of(resource),
        s.runtime.client().new_attempt("run").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap()
}

async fn start(
    s: &Setup,
    on_cancel: OnCancel,
    policy: CancelPolicy,
) -> (LeaseJob<WorkerMsg>, mpsc::UnboundedReceiver<Event>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let job = s
        .runtime
        .spawn_under_lease(
            &request(s, "r"),
            Worker,
            move |_ctx| WorkerArgs {
                on_cancel,
                events: tx,
            },
            policy,
        )
        .await
        .unwrap()
        .started()
        .expect("acquired");
    assert!(matches!(rx.recv().await, Some(Event::Started)));
    (job, rx)
}

/// Lets the actors run until nothing is left to do at this instant.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn cancellations(rx: &mut mpsc::UnboundedReceiver<Event>) -> Vec<LeaseCancelled> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let Event::Cancelled(c, _) = e {
            out.push(c);
        }
    }
    out
}

/// A renewal fault that makes every reply vanish (UNKNOWN after the retries).
fn lose_replies(s: &Setup) {
    s.backend.set_fault(Some(MemoryFault::LoseReply));
}

#[tokio::test(start_paused = true)]
async fn lease_held_ten_ttls_stays_active_renewed_at_the_cadence_and_never_cancelled() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let calls = s.backend.calls();
    sleep(TTL * 10).await;
    settle().await;
    let status = job.status().await.unwrap();
    assert_eq!(status.state, LeaseState::Active);
    assert_eq!(status.cancelled, None);
    // ttl/3 cadence: 30 renewals in 10 TTLs (give or take the boundary).
    assert!(
        (29..=31).contains(&status.renewals),
        "{} renewals",
        status.renewals
    );
    assert_eq!(s.backend.calls() - calls, status.renewals);
    assert!(job.context().remaining() > TTL / 2);
    assert!(cancellations(&mut rx).is_empty());
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn key_deleted_behind_the_holder_cancels_the_worker_within_one_renew_period() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let keys = s
        .runtime
        .client()
        .keys(&Purpose::new("job").unwrap(), &ResourceDigest::of("r"));
    sleep(MS * 100).await;
    let deleted_at = Instant::now();
    assert!(s.backend.delete(&keys));
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Lost(LostReason::Absent));
    assert_eq!(c.token, job.token());
    assert!(at - deleted_at <= TTL / 3, "took {:?}", at - deleted_at);
    let report = job.wait().await;
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Lost(LostReason::Absent),
            killed: false
        }
    );
    assert_eq!(report.release, ReleaseOutcome::AlreadyAbsent);
}

#[tokio::test(start_paused = true)]
async fn lost_renew_replies_make_the_lease_unknown_and_cancel_before_validity_ends() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    lose_replies(&s);
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Unknown);
    assert!(at < valid_until, "cancelled after validity ended");
    assert!(c.remaining_validity > Duration::ZERO);
    assert_eq!(at + c.remaining_validity, valid_until);
    assert!(job.context().is_cancelled());
    assert_eq!(job.context().remaining(), Duration::ZERO);
    s.backend.set_fault(None);
    let report = job.wait().await;
    assert_eq!(
        report.release,
        ReleaseOutcome::Released,
        "UNKNOWN still releases"
    );
}

#[tokio::test(start_paused = true)]
async fn unconfirmable_renewal_cancels_at_the_safety_margin() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    s.backend.set_fault(Some(MemoryFault::Unavailable));
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::RenewalUnconfirmed);
    let margin = s.runtime.client().settings().safety_margin();
    assert!(at <= valid_until - margin + MS, "cancelled too late");
    assert!(at >= valid_until - margin - TTL / 3, "cancelled too early");
    s.backend.set_fault(None);
    let _ = job.wait().await;
}

#[tokio::test(start_paused = true)]
async fn worker_that_ignores_cancellation_is_killed_at_validity_end_under_kill() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    lose_replies(&s);
    let Some(Event::Cancelled(..)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    s.backend.set_fault(None);
    let report = job.wait().await;
    let stopped_at = Instant::now();
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Unknown,
            killed: true
        }
    );
    assert!(
        stopped_at <= valid_until + MS,
        "worker outlived local validity"
    );
    assert!(stopped_at >= valid_until, "killed before validity ended");
    assert!(
        cancellations(&mut rx).is_empty(),
        "exactly one cancellation"
    );
}

#[tokio::test(start_paused = true)]
async fn worker_that_ignores_cancellation_is_left_running_under_notify_only() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::NotifyOnly).await;
    lose_replies(&s);
    sleep(TTL * 3).await;
    settle().await;
    assert_eq!(
        job.worker().get_status(),
        ractor::ActorStatus::Running,
        "NotifyOnly leaves the worker to decide"
    );
    assert_eq!(cancellations(&mut rx).len(), 1, "exactly one cancellation");
    s.backend.set_fault(None);
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let report = job.wait().await;
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Unknown,
            killed: false
        }
    );
}

#[tokio::test(start_paused = true)]
async fn worker_exit_releases_the_lease_at_once() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    sleep(MS * 500).await;
    let exited = Instant::now();
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(
        Instant::now(),
        exited,
        "released at once, not left to expire"
    );
    assert_eq!(s.backend.held_leases(), 0);
    assert_eq!(s.runtime.held(), 0, "the lease slot is free again");
}

#[tokio::test(start_paused = true)]
async fn worker_error_is_released_and_reported_as_failed() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.worker().send_message(WorkerMsg::Fail).unwrap();
    let report = job.wait().await;
    assert!(
        matches!(&report.end, JobEnd::Failed { error } if error.contains("job failed")),
        "{report:?}"
    );
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert!(cancellations(&mut rx).is_empty());
    assert_eq!(s.backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn worker_panic_is_released_and_reported_as_failed() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.worker().send_message(WorkerMsg::Panic).unwrap();
    let report = job.wait().await;
    assert!(
        matches!(&report.end, JobEnd::Failed { error } if error.contains("job panicked")),
        "{report:?}"
    );
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(s.backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn killing_the_lease_actor_stops_the_worker() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let worker = job.worker().clone();
    job.lease_actor().kill();
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Aborted);
    // Nothing was released here: the release was left to the handle's drop, and says so.
    assert!(
        matches!(
            &report.release,
            ReleaseOutcome::Indeterminate { detail } if detail.kind == FailureKind::Abandoned
        ),
        "{report:?}"
    );
    settle().await;
    assert_eq!(worker.get_status(), ractor::ActorStatus::Stopped);
    assert!(
        !matches!(rx.try_recv(), Ok(Event::Cancelled(..))),
        "no cancellation to a stopped worker"
    );
    // The handle's drop released the lease best effort.
    settle().await;
    assert_eq!(s.backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn stopping_the_lease_actor_stops_the_worker_then_releases() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let worker = job.worker().clone();
    job.lease_actor().stop(None);
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Aborted);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(worker.get_status(), ractor::ActorStatus::Stopped);
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_the_worker_once_and_releases_after_it_exits() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.shutdown();
    job.shutdown();
    let Some(Event::Cancelled(c, _)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Shutdown);
    let report = job.wait().await;
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert!(
        cancellations(&mut rx).is_empty(),
        "exactly one cancellation"
    );
}

#[tokio::test(start_paused = true)]
async fn the_lease_limit_is_a_typed_error_before_any_io() {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let s = Setup {
        backend: backend.clone(),
        runtime: LeaseRuntime::new(client).with_max_leases(1),
    };
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let calls = backend.calls();
    let (tx, _rx2) = mpsc::unbounded_channel();
    let err = s
        .runtime
        .spawn_under_lease(
            &request(&s, "other"),
            Worker,
            move |_| WorkerArgs {
                on_cancel: OnCancel::Exit,
                events: tx,
            },
            CancelPolicy::Kill,
        )
        .await
        .unwrap_err();
    assert_eq!(err, RuntimeError::LimitReached { max: 1 });
    assert_eq!(backend.calls(), calls);
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let _ = job.wait().await;
}

// Real threads: the actor stopping and the caller resuming race only there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_slot_is_free_when_its_wait_returns() {
    // With room for one lease, the next job starts right after the last one's `wait()`:
    // the slot is given back before the report, never a moment after it.
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let s = Setup {
        backend,
        runtime: LeaseRuntime::new(client).with_max_leases(1),
    };
    for round in 0..50 {
        let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
        job.worker().send_message(WorkerMsg::Exit).unwrap();
        let report = job.wait().await;
        assert_eq!(report.release, ReleaseOutcome::Released, "round {round}");
        assert_eq!(
            s.runtime.held(),
            0,
            "round {round}: the slot is still taken"
        );
    }
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let _ = job.wait().await;
}

#[tokio::test(start_paused = true)]
async fn a_ttl_without_room_for_renewals_is_rejected_before_any_io() {
    let s = setup();
    let req = LeaseRequest::builder(
        Purpose::new("job").unwrap(),
        ResourceDigest::of("r"),
        s.runtime.client().new_attempt("run").unwrap(),
    )
    .ttl(Duration::from_millis(300))
    .build()
    .unwrap();
    let (tx, _rx) = mpsc::unbounded_channel();
    let err = s
        .runtime
        .spawn_under_lease(
            &req,
            Worker,
            move |_| WorkerArgs {
                on_cancel: OnCancel::Exit,
                events: tx,
            },
            CancelPolicy::Kill,
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        RuntimeError::Invalid(LeaseError::InvalidDuration {
            param: "renew_every",
            ..
        })
    ));
    assert_eq!(s.backend.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn contended_lease_starts_no_worker() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let (tx, mut rx2) = mpsc::unbounded_channel();
    let outcome = s
        .runtime
        .spawn_under_lease(
            &request(&s, "r"),
            Worker,
            move |_| WorkerArgs {
                on_cancel: OnCancel::Exit,
                events: tx,
            },
            CancelPolicy::Kill,
        )
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        SpawnOutcome::NotAcquired(AcquireOutcome::Contended { .. })
    ));
    assert!(rx2.try_recv().is_err(), "no worker started");
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let _ = job.wait().await;
}

mod grid {
    //! worker {exits, errs, panics, ignores cancel} × lease {held, lost, unknown, validity
    //! ends}: the end, the release, and the number of cancellations.
    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Lease {
        Held,
        Lost,
        Unknown,
        ValidityEnds,
    }

    #[derive(Debug, Clone, Copy)]
    enum Work {
        Exits,
        Errs,
        Panics,
        IgnoresCancel,
    }

    async fn cell(lease: Lease, work: Work) {
        let s = setup();
        let on_cancel = match work {
            Work::IgnoresCancel => OnCancel::Ignore,
            _ => OnCancel::Exit,
        };
        let (job, mut rx) = start(&s, on_cancel, CancelPolicy::Kill).await;
        let keys = s
            .runtime
            .client()
            .keys(&Purpose::new("job").unwrap(), &ResourceDigest::of("r"));
        match lease {
            Lease::Held => {}
            Lease::Lost => {
                s.backend.delete(&keys);
            }
            Lease::Unknown => lose_replies(&s),
            // Renewals never reach the store: the budget runs out.
            Lease::ValidityEnds => s.backend.set_fault(Some(MemoryFault::Unavailable)),
        }
        let expect_cancel = !matches!(lease, Lease::Held);
        if expect_cancel {
            // Wait for the cancellation, then act.
            loop {
                match rx.recv().await {
                    Some(Event::Cancelled(..)) => break,
                    Some(_) => {}
                    None => panic!("worker gone before cancellation"),
                }
            }
            s.backend.set_fault(None);
        } else {
            sleep(TTL).await;
        }
        match work {
            Work::Exits if !expect_cancel => {
                job.worker().send_message(WorkerMsg::Exit).unwrap();
            }
            Work::Exits | Work::IgnoresCancel => {} // exits on cancel / is killed
            Work::Errs => {
                let _ = job.worker().send_message(WorkerMsg::Fail);
            }
            Work::Panics => {
                let _ = job.worker().send_message(WorkerMsg::Panic);
            }
        }
        if let (Lease::Held, Work::IgnoresCancel) = (lease, work) {
            job.worker().send_message(WorkerMsg::Exit).unwrap();
        }
        let report = job.wait().await;
        let cancels = report.cancelled.iter().count();
        assert_eq!(cancels, usize::from(expect_cancel), "{lease:?} {work:?}");
        let leftovers = cancellations(&mut rx);
        assert!(
            leftovers.is_empty(),
            "{lease:?} {work:?}: second cancellation"
        );
        let want_reason = match lease {
            Lease::Held => None,
            Lease::Lost => Some(CancelReason::Lost(LostReason::Absent)),
            Lease::Unknown => Some(CancelReason::Unknown),
            Lease::ValidityEnds => Some(CancelReason::RenewalUnconfirmed),
        };
        assert_eq!(report.cancelled.as_ref().map(|c| c.reason), want_reason);
        match (work, expect_cancel, &report.end) {
            (Work::Errs | Work::Panics, true, JobEnd::Cancelled { .. }) => {
                // It exited on the cancellation before the failure message arrived.
            }
            (Work::Errs | Work::Panics, _, JobEnd::Failed { .. }) => {}
            (Work::Exits, false, JobEnd::Completed) => {}
            (Work::IgnoresCancel, false, JobEnd::Completed) => {}
            (Work::Exits, true, JobEnd::Cancelled { killed: false, .. }) => {}
            (Work::IgnoresCancel, true, JobEnd::Cancelled { killed: true, .. }) => {}
            (_, _, end) => panic!("{lease:?} {work:?}: unexpected end {end:?}"),
        }
        // A worker that exits on the cancellation is released while the fault still holds:
        // the first try fails (a lost reply: the release ran; refused: it did not) and the
        // retry 50 ms later, after the test healed the store, settles it. One that ignores
        // the cancellation is released after its kill, once the store answers again.
        let ignores = matches!(work, Work::IgnoresCancel);
        match (lease, &report.release) {
            (Lease::Lost, ReleaseOutcome::AlreadyAbsent) => {}
            (Lease::Held, ReleaseOutcome::Released) => {}
            (Lease::Unknown | Lease::ValidityEnds, ReleaseOutcome::Released) if ignores => {}
            (Lease::Unknown, ReleaseOutcome::AlreadyAbsent) if !ignores => {}
            (Lease::ValidityEnds, ReleaseOutcome::Released) if !ignores => {}
            (_, release) => panic!("{lease:?} {work:?}: unexpected release {release:?}"),
        }
        if matches!(
            report.release,
            ReleaseOutcome::Released | ReleaseOutcome::AlreadyAbsent
        ) {
            assert_eq!(s.backend.held_leases(), 0, "{lease:?} {work:?}");
        }
    }

    macro_rules! grid {
        ($($name:ident: $lease:ident x $work:ident;)*) => {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    cell(Lease::$lease, Work::$work).await
                }
            )*
        };
    }

    grid! {
        held_exits: Held x Exits;
        held_errs: Held x Errs;
        held_panics: Held x Panics;
        held_ignores_cancel: Held x IgnoresCancel;
        lost_exits: Lost x Exits;
        lost_errs: Lost x Errs;
        lost_panics: Lost x Panics;
        lost_ignores_cancel: Lost x IgnoresCancel;
        unknown_exits: Unknown x Exits;
        unknown_errs: Unknown x Errs;
        unknown_panics: Unknown x Panics;
        unknown_ignores_cancel: Unknown x IgnoresCancel;
        validity_ends_exits: ValidityEnds x Exits;
        validity_ends_errs: ValidityEnds x Errs;
        validity_ends_panics: ValidityEnds x Panics;
        validity_ends_ignores_cancel: ValidityEnds x IgnoresCancel;
    }
}
