//! Renewals stalled past the TTL while keepers are stopped: the trials of the test that
//! pauses every write Redis takes.

use std::time::Duration;

use crate::common::RedisServer;
use crate::common::cli::*;
use crate::common::tree::*;
use crate::common::witness::*;

use crate::runs::*;

/// One trial of the stalled-renewal test, as measured (µs).
pub(crate) struct Stalled {
    /// The old tree's last write after the end of the pause, before which no next holder
    /// can be granted the lease: positive is an overlap.
    pub(crate) after_grant: i64,
    /// ... after the next holder's first write.
    pub(crate) after_next: i64,
    /// ... before the lease's end in Redis (negative: after it).
    pub(crate) before_end: Option<i64>,
}

/// `trials` trees under a lease each, their keepers stopped; then every write Redis takes is
/// paused for longer than the TTL (renewals, releases, acquisitions), while a next holder
/// waits for each lease.
pub(crate) fn stalled_trials(server: &RedisServer, dir: &TempDir, trials: usize) -> Vec<Stalled> {
    /// A TTL that leaves every renewal 500 ms (its command timeout) on a starved machine.
    const TTL: &[&str] = &["--ttl", "2s"];
    /// Twenty connecting at once to one server on a starved machine.
    const CONNECT: &[(&str, &str)] = &[("LEASEHOLD_CONNECT_TIMEOUT", "5s")];
    /// Longer than the TTL: every trial's lease ends in Redis before the pause does, and a
    /// kill due at local validity's end has half a second to land on a starved machine
    /// before anyone can be granted the lease. (The release that preceded leasehold's own
    /// kill could only run after the pause: that kill came after the grant, however long.)
    const PAUSE: Duration = Duration::from_millis(2500);
    let resources: Vec<String> = (0..trials).map(|i| format!("stalled-{i}")).collect();
    // All started before any is waited for: on a starved machine each start takes a while.
    let starting: Vec<Starting> = resources
        .iter()
        .map(|resource| Witnessed::spawn(server, dir, resource, TTL, false, CONNECT))
        .collect();
    let mut olds: Vec<Witnessed> = starting.into_iter().map(Starting::ready).collect();
    let nexts: Vec<Next> = resources
        .iter()
        .map(|resource| Next::start(server, dir, resource))
        .collect();
    let keepers = Stopped(olds.iter().map(|old| keeper_of(old.pids[2])).collect());
    for &keeper in &keepers.0 {
        assert!(send_signal(keeper, "STOP"), "kill -STOP keeper");
    }
    let pause_end = pause_writes(server, PAUSE);
    // Read while paused: no renewal can move them any more.
    let ends: Vec<Option<i64>> = resources
        .iter()
        .map(|resource| expiry_micros(server, keys_of(resource).lease()))
        .collect();
    let firsts: Vec<i64> = nexts.into_iter().map(Next::first_write).collect();
    let mut trials_seen = Vec::new();
    for (i, old) in olds.iter_mut().enumerate() {
        old.run
            .finish_within(EXIT_TIMEOUT, "run whose keeper was stopped")
            .assert_code(124, "run whose keeper was stopped");
        let last = old.last_write();
        trials_seen.push(Stalled {
            after_grant: last - pause_end,
            after_next: last - firsts[i],
            before_end: ends[i].map(|end| end - last),
        });
    }
    trials_seen
}

/// Pauses every write Redis takes for `pause` (`CLIENT PAUSE … WRITE`) and returns when
/// the pause ends at the earliest, in µs since the epoch by Redis's clock (the machine's,
/// which the witnesses read): `TIME` and the pause run in one transaction, nothing between
/// them, so a test that was slow to send the pause cannot make the bound early.
pub(crate) fn pause_writes(server: &RedisServer, pause: Duration) -> i64 {
    let mut conn = server.conn();
    let (time, _): (Vec<i64>, String) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis().to_string())
        .arg("WRITE")
        .query(&mut conn)
        .expect("TIME and CLIENT PAUSE");
    let [secs, micros] = time[..] else {
        panic!("TIME answered {time:?}");
    };
    secs * 1_000_000 + micros + i64::try_from(pause.as_micros()).unwrap_or(i64::MAX)
}

/// Keepers the test stopped: resumed when it ends, however it ends (leasehold SIGKILLs a
/// stopped keeper once it saw the tree gone; after a failure one may be left).
pub(crate) struct Stopped(Vec<u32>);

impl Drop for Stopped {
    fn drop(&mut self) {
        for &keeper in &self.0 {
            if is_alive(keeper) {
                send_signal(keeper, "CONT");
            }
        }
    }
}
