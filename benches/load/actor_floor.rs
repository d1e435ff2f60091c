//! The floor of a held lease's memory: `n` bare ractor actors, idle, built with the ractor
//! features leasehold builds with (row `floor-actor`, `rss_bytes_per_actor`). A lease R
//! holds is a lease actor and the task `run_under_lease`'s future is spawned as (the work
//! runs in it), so what R's `rss_bytes_per_lease` costs above this row is leasehold's own.

use super::*;

/// An actor that does nothing: what ractor alone costs while it waits for a message.
struct Idle;

impl Actor for Idle {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, (): ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

pub(crate) async fn actor_floor(env: Env, n: usize) {
    let rss_before = rss_kb();
    let started = Instant::now();
    let mut actors = Vec::with_capacity(n);
    for _ in 0..n {
        let spawned = Actor::spawn(None, Idle, ()).await;
        actors.push(spawned.expect("spawn an idle actor"));
    }
    let spawn_s = started.elapsed().as_secs_f64();
    // As R measures: after the spawns, with every actor waiting in its message loop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_after = rss_kb();
    let per_actor = (rss_after as f64 - rss_before as f64) * 1024.0 / n as f64;
    env.row(
        "floor-actor",
        n as f64 / spawn_s,
        (f64::NAN, f64::NAN),
        ("ratio_to_floor", None),
        vec![
            ("actors", n.to_string()),
            ("rss_bytes_per_actor", format!("{per_actor:.0}")),
        ],
    )
    .print();
    for (actor, handle) in actors {
        actor.stop(None);
        let _ = handle.await;
    }
}

/// `rss_above_actor_bytes` of R's row: what a held lease costs above a bare actor, from the
/// two rows of one flavour.
pub(crate) fn rss_above_actor(flavor: &str, r_line: &str, floor_line: &str) {
    let value = |line: &str, name: &str| -> f64 {
        field_of(line, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let workload = field_of(r_line, "workload").unwrap_or("R");
    let lease = value(r_line, "rss_bytes_per_lease");
    let actor = value(floor_line, "rss_bytes_per_actor");
    println!(
        "RESULT workload={workload}-vs-floor-actor flavor={flavor} rss_bytes_per_lease={lease:.0} \
         rss_bytes_per_actor={actor:.0} rss_above_actor_bytes={:.0} rss_ratio_to_actor={:.3} \
         server={}",
        lease - actor,
        lease / actor,
        server_label()
    );
}
