//! leasehold's runtime in a deterministic simulation (docs/design.md §15).
//!
//! Three clients — each a `LeaseRuntime` on its own connection to one in-memory store —
//! run a supervisor on a one-permit resource and a loop of jobs on a two-permit one
//! (`run_under_lease`, `spawn_under_lease`, and `attach` to a long-running actor, in turn), on one current-thread tokio runtime with the clock paused. A seed draws
//! the faults (lost requests and replies, slow replies, unavailability, of one connection or
//! the whole store), keys deleted under their holders, empty restarts and drains, and their
//! instants; one seed in ten also pauses a client's process for a while (then each client
//! runs on a runtime of its own, driven in lock-step: [`lockstep`]). The run records what
//! every worker saw, and [`checker::check`] judges the history.
//!
//! `LEASEHOLD_SIM_SEED=<n> cargo test -p leasehold-sim --test seeds` replays one seed.

pub mod checker;
pub mod driver;
pub mod explore;
pub mod history;
pub mod lockstep;
pub mod schedule;
pub mod workers;
