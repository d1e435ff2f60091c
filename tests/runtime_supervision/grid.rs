//! worker {exits, errs, panics, ignores cancel} × lease {held, lost, unknown, validity
//! ends}: the end, the release, and the number of cancellations.

use tokio::time::sleep;

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
