use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{FailureDetail, FailureKind, ReplicatedReply, SendFailure};
use crate::lease::acquire::{AcquireOutcome, AcquireSent};
use crate::lease::outcome::{InspectOutcome, LostReason, ReleaseOutcome, Replication};
use crate::protocol::{
    AcquireReply, Attempt, FencingToken, InspectReply, OperationId, ReleaseReply, RenewReply,
};

#[test]
fn a_counted_lease_reads_as_its_acquisition_would_see_it() {
    let ms = Duration::from_millis;
    let token = FencingToken::new;
    let other = |left, t| InspectOutcome::HeldByOther {
        remaining: ms(left),
        token: token(t),
        holder: None,
    };
    let delayed = |left, t| InspectOutcome::LockDelayed {
        remaining: ms(left),
        token: token(t),
        holder: None,
    };
    let mine = InspectOutcome::HeldByAttempt {
        remaining: ms(900),
        token: token(7),
        holder: None,
    };
    let lost = InspectOutcome::Indeterminate {
        detail: FailureDetail::new(FailureKind::Timeout, "t"),
    };
    let cases = [
        (vec![other(5, 1), lost.clone(), mine.clone()], mine),
        (
            vec![other(5, 1), InspectOutcome::Absent, lost.clone()],
            lost,
        ),
        (
            vec![other(5, 1), InspectOutcome::Absent],
            InspectOutcome::Absent,
        ),
        (
            vec![other(50, 1), delayed(5, 2), other(5, 3)],
            delayed(5, 2),
        ),
        (vec![other(50, 1), other(20, 2)], other(20, 2)),
        (vec![other(50, 1)], other(50, 1)),
    ];
    for (slots, read) in cases {
        assert_eq!(InspectOutcome::of_slots(slots.clone()), read, "{slots:?}");
    }
}

fn failures() -> [(SendFailure, FailureDetail); 3] {
    let detail = |kind| FailureDetail::new(kind, "x");
    [
        (
            SendFailure::NotSent(detail(FailureKind::QueueFull)),
            detail(FailureKind::QueueFull),
        ),
        (
            SendFailure::NotSent(detail(FailureKind::Connect)),
            detail(FailureKind::Connect),
        ),
        (
            SendFailure::MaybeSent(detail(FailureKind::Timeout)),
            detail(FailureKind::Timeout),
        ),
    ]
}

#[test]
fn a_failure_is_queue_full_unavailable_or_indeterminate_as_sure_as_it_is() {
    let [(full, full_d), (refused, refused_d), (lost, lost_d)] = failures();
    assert_eq!(
        InspectOutcome::from(Err(full.clone())),
        InspectOutcome::QueueFull {
            detail: full_d.clone()
        }
    );
    assert_eq!(
        InspectOutcome::from(Err(refused.clone())),
        InspectOutcome::Unavailable {
            detail: refused_d.clone()
        }
    );
    assert_eq!(
        InspectOutcome::from(Err(lost.clone())),
        InspectOutcome::Indeterminate {
            detail: lost_d.clone()
        }
    );
    // A release is never refused for want of room: any `NotSent` is `Unavailable`.
    assert_eq!(
        ReleaseOutcome::from(Err(full)),
        ReleaseOutcome::Unavailable { detail: full_d }
    );
    assert_eq!(
        ReleaseOutcome::from(Err(refused)),
        ReleaseOutcome::Unavailable { detail: refused_d }
    );
    assert_eq!(
        ReleaseOutcome::from(Err(lost)),
        ReleaseOutcome::Indeterminate { detail: lost_d }
    );
}

#[test]
fn each_reply_maps_to_its_outcome() {
    let token = FencingToken::new(7);
    let ms = Duration::from_millis;
    assert_eq!(
        ReleaseOutcome::from(Ok(ReleaseReply::Released)),
        ReleaseOutcome::Released
    );
    assert_eq!(
        ReleaseOutcome::from(Ok(ReleaseReply::Absent)),
        ReleaseOutcome::AlreadyAbsent
    );
    assert_eq!(
        ReleaseOutcome::from(Ok(ReleaseReply::NotOwner)),
        ReleaseOutcome::NotOwner
    );
    let delayed = InspectReply::Delayed {
        pttl: ms(5),
        token,
        holder: None,
    };
    assert_eq!(
        InspectOutcome::from(Ok(delayed)),
        InspectOutcome::LockDelayed {
            remaining: ms(5),
            token,
            holder: None
        }
    );
    assert_eq!(
        InspectOutcome::from(Ok(InspectReply::Absent)),
        InspectOutcome::Absent
    );
    assert_eq!(
        LostReason::try_from(RenewReply::Absent),
        Ok(LostReason::Absent)
    );
    assert_eq!(
        LostReason::try_from(RenewReply::NotOwner),
        Ok(LostReason::NotOwner)
    );
    assert_eq!(
        LostReason::try_from(RenewReply::Renewed),
        Err(RenewReply::Renewed)
    );
}

#[test]
fn an_acquire_reply_that_holds_nothing_this_client_can_name_makes_no_handle() {
    let attempt = Attempt::new(OperationId::new("op").unwrap()).unwrap();
    let sent = AcquireSent {
        attempt: &attempt,
        permits: 2,
        sent_at: Instant::now(),
        ttl: Duration::from_secs(30),
        drift: Duration::from_millis(10),
        retry_after_fallback: Duration::from_millis(50),
    };
    let read = |reply| {
        AcquireOutcome::from_reply(reply, &sent, |_, _, _| unreachable!("no lease is held"))
    };
    let token = FencingToken::new(3);
    let beyond = AcquireReply::Acquired {
        ttl: sent.ttl,
        token,
        slot: 2,
    };
    assert!(matches!(
        read(Ok(beyond)),
        AcquireOutcome::Indeterminate { attempt: a, detail }
            if a == attempt && detail.kind == FailureKind::MalformedReply
    ));
    let none_left = AcquireReply::Contended {
        pttl: Duration::ZERO,
        rank: None,
    };
    assert!(matches!(
        read(Ok(none_left)),
        AcquireOutcome::Contended { retry_after } if retry_after == sent.retry_after_fallback
    ));
    let delayed = AcquireReply::Delayed {
        pttl: Duration::from_millis(70),
        rank: Some(2),
    };
    assert!(matches!(
        read(Ok(delayed)),
        AcquireOutcome::LockDelayed { retry_after } if retry_after == Duration::from_millis(70)
    ));
    let [(full, _), (refused, _), (lost, _)] = failures();
    assert!(matches!(read(Err(full)), AcquireOutcome::QueueFull { .. }));
    assert!(matches!(
        read(Err(refused)),
        AcquireOutcome::Unavailable { .. }
    ));
    assert!(matches!(
        read(Err(lost)),
        AcquireOutcome::Indeterminate { attempt: a, .. } if a == attempt
    ));
}

#[test]
fn a_replica_wait_says_what_wait_answered_or_that_nothing_was_waited_for() {
    let acked = |acked| {
        Ok(ReplicatedReply {
            reply: AcquireReply::Contended {
                pttl: Duration::ZERO,
                rank: None,
            },
            acked,
        })
    };
    let timeout = FailureDetail::new(FailureKind::Timeout, "wait");
    assert_eq!(
        Replication::of_wait(&acked(Some(Ok(1))), 2),
        Replication::Acknowledged {
            acked: 1,
            wanted: 2
        }
    );
    assert_eq!(
        Replication::of_wait(&acked(Some(Err(timeout.clone()))), 2),
        Replication::Unknown { detail: timeout }
    );
    assert_eq!(
        Replication::of_wait(&acked(None), 2),
        Replication::NotWaited
    );
    let [(_, _), (refused, _), _] = failures();
    assert_eq!(
        Replication::of_wait(&Err(refused), 2),
        Replication::NotWaited
    );
}
