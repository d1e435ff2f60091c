//! The timers: the queue as a table (sans I/O), then the task on paused time with a
//! recording actor, as a lease actor arms, re-arms and disarms.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use super::{ArmedTimer, LeaseKey, Queue, Request, Tick, Timers};
use crate::runtime::lease_actor::message::{Command, LeaseActorMsg};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// An actor that records the generation of every tick it gets, with when it got it.
struct Recorder;

type Ticks = Arc<Mutex<Vec<(u64, Instant)>>>;

impl Actor for Recorder {
    type Msg = LeaseActorMsg;
    type State = Ticks;
    type Arguments = Ticks;

    async fn pre_start(
        &self,
        _: ActorRef<LeaseActorMsg>,
        ticks: Ticks,
    ) -> Result<Ticks, ActorProcessingErr> {
        Ok(ticks)
    }

    async fn handle(
        &self,
        _: ActorRef<LeaseActorMsg>,
        message: LeaseActorMsg,
        ticks: &mut Ticks,
    ) -> Result<(), ActorProcessingErr> {
        if let Command::Tick(generation) = message.0 {
            ticks.lock().unwrap().push((generation, Instant::now()));
        }
        Ok(())
    }
}

async fn recorder() -> (ActorRef<LeaseActorMsg>, Ticks) {
    let ticks = Ticks::default();
    let (actor, _) = Actor::spawn(None, Recorder, ticks.clone()).await.unwrap();
    (actor, ticks)
}

fn generations(ticks: &Ticks) -> Vec<u64> {
    ticks.lock().unwrap().iter().map(|(g, _)| *g).collect()
}

fn arm(
    lease: LeaseKey,
    at: Instant,
    previous: Option<Instant>,
    actor: &ActorRef<LeaseActorMsg>,
    generation: u64,
) -> Request {
    Request::Arm {
        lease,
        at,
        previous,
        tick: Tick {
            actor: actor.clone(),
            generation,
        },
    }
}

#[tokio::test(start_paused = true)]
async fn the_queue_as_a_table() {
    let (actor, _ticks) = recorder().await;
    let t0 = Instant::now();
    let at = |n: u64| t0 + ms(n);
    // Each row: the requests applied, then (now, generations due then, next deadline).
    type Row = (Vec<Request>, u64, Vec<u64>, Option<u64>);
    let rows: Vec<(&str, Row)> = vec![
        ("nothing armed", (vec![], 0, vec![], None)),
        (
            "armed, not due",
            (vec![arm(1, at(10), None, &actor, 1)], 5, vec![], Some(10)),
        ),
        (
            "due at its instant",
            (vec![arm(1, at(10), None, &actor, 1)], 10, vec![1], None),
        ),
        (
            "re-armed later: the earlier deadline is gone",
            (
                vec![
                    arm(1, at(10), None, &actor, 1),
                    arm(1, at(20), Some(at(10)), &actor, 2),
                ],
                15,
                vec![],
                Some(20),
            ),
        ),
        (
            "re-armed earlier",
            (
                vec![
                    arm(1, at(20), None, &actor, 1),
                    arm(1, at(10), Some(at(20)), &actor, 2),
                ],
                25,
                vec![2],
                None,
            ),
        ),
        (
            "disarmed",
            (
                vec![
                    arm(1, at(10), None, &actor, 1),
                    Request::Disarm {
                        lease: 1,
                        at: at(10),
                    },
                ],
                30,
                vec![],
                None,
            ),
        ),
        (
            "a disarm of another instant leaves the deadline",
            (
                vec![
                    arm(1, at(10), None, &actor, 1),
                    Request::Disarm {
                        lease: 1,
                        at: at(9),
                    },
                ],
                30,
                vec![1],
                None,
            ),
        ),
        (
            "two leases at one instant, then one later, in order",
            (
                vec![
                    arm(2, at(10), None, &actor, 7),
                    arm(1, at(10), None, &actor, 5),
                    arm(3, at(11), None, &actor, 9),
                ],
                10,
                vec![5, 7],
                Some(11),
            ),
        ),
        (
            "a deadline armed in the past is due at once",
            (vec![arm(1, t0, None, &actor, 3)], 0, vec![3], None),
        ),
    ];
    for (name, (requests, now, due, next)) in rows {
        let mut queue = Queue::default();
        for request in requests {
            queue.apply(request);
        }
        let got: Vec<u64> = queue
            .due(at(now))
            .into_iter()
            .map(|t| t.generation)
            .collect();
        assert_eq!(got, due, "{name}: due");
        assert_eq!(queue.next(), next.map(at), "{name}: next");
        queue.armed.clear(); // Dropping a queue ticks what it holds: not wanted here.
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_ticks_at_its_instant_and_a_replaced_one_never() {
    let (actor, ticks) = recorder().await;
    let mut timer = ArmedTimer::new(Timers::default(), 1);
    let t0 = Instant::now();
    timer.arm(&actor, t0 + ms(100));
    timer.arm(&actor, t0 + ms(300));
    assert_eq!(timer.armed(), Some(t0 + ms(300)));
    assert!(timer.is_current(2) && !timer.is_current(1));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let got = ticks.lock().unwrap().clone();
    assert_eq!(got, vec![(2, t0 + ms(300))]);
}

#[tokio::test(start_paused = true)]
async fn arming_the_instant_armed_already_changes_nothing_and_disarming_makes_a_tick_stale() {
    let (actor, ticks) = recorder().await;
    let mut timer = ArmedTimer::new(Timers::default(), 1);
    let t0 = Instant::now();
    timer.arm(&actor, t0 + ms(100));
    timer.arm(&actor, t0 + ms(100));
    assert!(
        timer.is_current(1),
        "the same instant again is no new arming"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ticks.lock().unwrap().clone(), vec![(1, t0 + ms(100))]);
    timer.ticked();
    timer.disarm();
    assert!(
        !timer.is_current(1),
        "a tick of before the disarming is stale"
    );
}

#[tokio::test(start_paused = true)]
async fn a_disarmed_deadline_never_ticks_nor_one_of_a_dropped_timer() {
    let (actor, ticks) = recorder().await;
    let timers = Timers::default();
    let t0 = Instant::now();
    let mut disarmed = ArmedTimer::new(timers.clone(), 1);
    disarmed.arm(&actor, t0 + ms(100));
    disarmed.disarm();
    assert_eq!(disarmed.armed(), None);
    let mut dropped = ArmedTimer::new(timers.clone(), 2);
    dropped.arm(&actor, t0 + ms(100));
    drop(dropped);
    let mut kept = ArmedTimer::new(timers, 3);
    kept.arm(&actor, t0 + ms(200));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ticks.lock().unwrap().clone(), vec![(1, t0 + ms(200))]);
}

#[tokio::test(start_paused = true)]
async fn many_leases_share_one_task_and_tick_in_deadline_order() {
    let (actor, ticks) = recorder().await;
    let timers = Timers::default();
    let t0 = Instant::now();
    let mut armed: Vec<ArmedTimer> = (0..1_000u64)
        .map(|lease| ArmedTimer::new(timers.clone(), lease))
        .collect();
    // Deadlines 1..=1000 ms, armed in reverse.
    for (lease, timer) in armed.iter_mut().enumerate().rev() {
        timer.arm(&actor, t0 + ms(lease as u64 + 1));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = ticks.lock().unwrap().clone();
    assert_eq!(got.len(), 1_000);
    for (i, (generation, when)) in got.iter().enumerate() {
        assert_eq!(*generation, 1);
        assert_eq!(*when, t0 + ms(i as u64 + 1), "tick {i}");
    }
}

/// A timer task whose runtime shut down: its deadlines tick at once, and the next arming
/// starts a task on the runtime arming.
#[test]
fn a_timer_task_ending_with_its_runtime_ticks_what_it_held_and_arming_starts_another() {
    let timers = Timers::default();
    let ticks = Ticks::default();
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let actor = main.block_on(async {
        let (actor, _) = Actor::spawn(None, Recorder, ticks.clone()).await.unwrap();
        actor
    });
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let mut timer = ArmedTimer::new(timers.clone(), 1);
    other.block_on(async {
        timer.arm(&actor, Instant::now() + Duration::from_secs(3600));
        tokio::task::yield_now().await;
    });
    drop(other); // The timer task ends with the deadline in its queue.
    main.block_on(async {
        tokio::time::sleep(ms(1)).await;
        assert_eq!(generations(&ticks), vec![1], "ticked when its task ended");
        timer.ticked();
        timer.arm(&actor, Instant::now() + ms(10));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(generations(&ticks), vec![1, 2], "armed again on a new task");
    });
}

/// Leases of one `LeaseRuntime` on two tokio runtimes: the deadline of an actor on the
/// second is ticked while the first, whose actor armed before, is not driven at all.
#[test]
fn each_tokio_runtime_has_its_own_timer_task() {
    let timers = Timers::default();
    let build = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let (first, second) = (build(), build());
    let mut on_first = first.block_on(async {
        let (actor, _) = recorder().await;
        let mut timer = ArmedTimer::new(timers.clone(), 1);
        timer.arm(&actor, Instant::now() + Duration::from_secs(3600));
        timer
    });
    // `first` is alive but nobody drives it from here on.
    second.block_on(async {
        let (actor, ticks) = recorder().await;
        let mut timer = ArmedTimer::new(timers.clone(), 2);
        timer.arm(&actor, Instant::now() + ms(10));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(generations(&ticks), vec![1]);
    });
    on_first.disarm();
}

/// Arming while the actor's runtime shuts down (a handler caught in it) gives up instead
/// of spinning: the task it starts is gone at once, and no deadline can be kept there.
#[test]
fn arming_during_a_runtime_shutdown_returns() {
    struct ArmsWhenDropped(Option<(ArmedTimer, ActorRef<LeaseActorMsg>)>);
    impl Drop for ArmsWhenDropped {
        fn drop(&mut self) {
            if let Some((mut timer, actor)) = self.0.take() {
                timer.arm(&actor, Instant::now() + ms(10));
            }
        }
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (actor, _ticks) = recorder().await;
            let mut timer = ArmedTimer::new(Timers::default(), 1);
            timer.arm(&actor, Instant::now() + Duration::from_secs(3600));
            let guard = ArmsWhenDropped(Some((timer, actor)));
            tokio::spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
            tokio::task::yield_now().await;
        });
        drop(runtime); // Drops the task above, whose guard arms.
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the runtime's shutdown finished");
}
