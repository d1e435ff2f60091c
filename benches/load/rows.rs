//! The core child's rows: each workload's parts (leasehold, the floors, the peers) and
//! how they print, with their ratios to one another.

use super::*;

pub(crate) fn field_of_row(row: &Row, name: &str) -> f64 {
    row.extra
        .iter()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// One workload's parts: leasehold's, the floor's and each peer's, added up over its slices.
#[derive(Default)]
pub(crate) struct Parts {
    pub(crate) lease: Part,
    pub(crate) floor: Part,
    /// The fenced floor's (W1, W2; W3 has none: empty).
    pub(crate) fenced: Part,
    pub(crate) rslock: Part,
    pub(crate) arl: Part,
}

impl Parts {
    /// `ratio_to_rslock` and `ratio_to_async_redis_lock` of leasehold's row: its rate over
    /// each peer's (> 1: leasehold does more per second); `srv_cpu_ratio_to_…`: Redis CPU per
    /// operation over each peer's (> 1: leasehold costs Redis more).
    fn peer_ratios(&self) -> [(&'static str, String); 4] {
        let lease = self.lease.ops_per_s();
        let srv = |part: &Part| part.used.per(part.ops).1;
        let text = |r: Option<f64>| r.map_or("na".to_owned(), |r| format!("{r:.3}"));
        [
            (
                "ratio_to_rslock",
                text(ratio(lease, self.rslock.ops_per_s())),
            ),
            (
                "ratio_to_async_redis_lock",
                text(ratio(lease, self.arl.ops_per_s())),
            ),
            (
                "srv_cpu_ratio_to_rslock",
                text(ratio(srv(&self.lease), srv(&self.rslock))),
            ),
            (
                "srv_cpu_ratio_to_async_redis_lock",
                text(ratio(srv(&self.lease), srv(&self.arl))),
            ),
        ]
    }

    /// The rows of a lock-cycle workload (W1, W2): the floor, the fenced floor, each peer,
    /// then leasehold.
    pub(crate) fn cycle_rows(self, env: &Env, workload: &str, tasks: Option<usize>) {
        self.print_rows(workload, |name, part, ratio_to_floor| {
            cycle_row(env, name, part, tasks, ratio_to_floor)
        });
    }

    /// The rows of a contention workload (W3): the floor, each peer, then leasehold.
    pub(crate) fn contention_rows(self, env: &Env, workload: &str) {
        self.print_rows(workload, |name, part, ratio_to_floor| {
            contention_row(env, name, part, ratio_to_floor)
        });
    }

    /// `ratio_to_floor_fenced` of leasehold's row: its rate over the fenced floor's in the
    /// same run (> 1: leasehold does more per second), and `srv_cpu_ratio_to_floor_fenced`,
    /// its Redis CPU per operation over the fenced floor's (> 1: leasehold costs Redis
    /// more). None when the workload has no fenced floor (W3).
    fn fenced_ratios(&self) -> Option<[(&'static str, String); 2]> {
        if self.fenced.ops == 0 {
            return None;
        }
        let srv = |part: &Part| part.used.per(part.ops).1;
        let text = |r: Option<f64>| r.map_or("na".to_owned(), |r| format!("{r:.3}"));
        Some([
            (
                "ratio_to_floor_fenced",
                text(ratio(self.lease.ops_per_s(), self.fenced.ops_per_s())),
            ),
            (
                "srv_cpu_ratio_to_floor_fenced",
                text(ratio(srv(&self.lease), srv(&self.fenced))),
            ),
        ])
    }

    fn print_rows(self, workload: &str, row: impl Fn(&str, Part, Option<f64>) -> Row) {
        let peer_ratios = self.peer_ratios();
        let fenced_ratios = self.fenced_ratios();
        let floor = self.floor.ops_per_s();
        let srv = |part: &Part| part.used.per(part.ops).1;
        // The fenced floor's Redis CPU over the floor's: what the token and the notice cost.
        let fenced_srv = ratio(srv(&self.fenced), srv(&self.floor))
            .map_or("na".to_owned(), |r| format!("{r:.3}"));
        let to_floor = |part: &Part| ratio(part.ops_per_s(), floor);
        let (rs, arl) = (to_floor(&self.rslock), to_floor(&self.arl));
        let lease = to_floor(&self.lease);
        let fenced = to_floor(&self.fenced);
        row(&format!("floor-{workload}"), self.floor, Some(1.0)).print();
        if fenced_ratios.is_some() {
            let mut floor_fenced = row(&format!("floor-fenced-{workload}"), self.fenced, fenced);
            floor_fenced
                .extra
                .push(("srv_cpu_ratio_to_floor", fenced_srv));
            floor_fenced.print();
        }
        row(&format!("rslock-{workload}"), self.rslock, rs).print();
        row(&format!("async-redis-lock-{workload}"), self.arl, arl).print();
        let mut leasehold = row(workload, self.lease, lease);
        leasehold.extra.extend(peer_ratios);
        leasehold.extra.extend(fenced_ratios.into_iter().flatten());
        leasehold.print();
    }
}

pub(crate) fn cycle_row(
    env: &Env,
    workload: &str,
    mut part: Part,
    tasks: Option<usize>,
    ratio_to_floor: Option<f64>,
) -> Row {
    let ops_per_s = part.ops_per_s();
    let (client_us, server_us) = part.used.per(part.ops);
    let mut extra = vec![
        ("cycles", part.ops.to_string()),
        ("secs", format!("{:.2}", part.used.wall)),
        ("client_cpu_us_per_op", format!("{client_us:.1}")),
        ("srv_cpu_us_per_op", format!("{server_us:.1}")),
        ("bg_cores", part.used.bg_cores()),
    ];
    if let Some(tasks) = tasks {
        extra.insert(0, ("tasks", tasks.to_string()));
    }
    env.row(
        workload,
        ops_per_s,
        part.samples.p50_p99(),
        ("ratio_to_floor", ratio_to_floor),
        extra,
    )
}

pub(crate) fn contention_row(
    env: &Env,
    workload: &str,
    mut part: Part,
    ratio_to_floor: Option<f64>,
) -> Row {
    assert!(part.ops > 0, "{workload}: nobody ever acquired the key");
    let (_, server_us_per_refused) = part.used.per(part.refused);
    // Commands sent: every try, plus one release per success.
    let commands = part.ops + part.refused + part.ops;
    let ops_per_s = part.ops_per_s();
    env.row(
        workload,
        ops_per_s,
        part.samples.p50_p99(),
        ("ratio_to_floor", ratio_to_floor),
        vec![
            ("tasks", W3_TASKS.to_string()),
            ("tries", (part.ops + part.refused).to_string()),
            ("acquired", part.ops.to_string()),
            ("refused", part.refused.to_string()),
            ("secs", format!("{:.2}", part.used.wall)),
            (
                "srv_cpu_us_per_refused",
                format!("{server_us_per_refused:.2}"),
            ),
            (
                "refused_share",
                format!("{:.3}", part.refused as f64 / commands as f64),
            ),
            ("bg_cores", part.used.bg_cores()),
        ],
    )
}
