//! Runtime layer: each held lease is a ractor actor that renews it and supervises the work it
//! protects (docs/design.md §8). Imports the lease core, the protocol, telemetry and the
//! error type; of the backend only the failure an outcome carries (`FailureDetail`,
//! `FailureKind`) — never a backend (the crate docs' layer table, checked by
//! `tests/layers/`).
//!
//! * [`LeaseRuntime::spawn_under_lease`] — acquire, then run a worker actor under the lease.
//! * [`LeaseRuntime::run_under_lease`] — the same for a plain future.
//! * [`LeaseRuntime::attach`] — a lease actor for a worker that already runs.
//! * [`LeaseRuntime::supervise`] — keep a job running under a lease across losses (leader
//!   election).
//! * [`LeaseRuntime::shutdown`] — drain on SIGTERM: cancel every job, release every lease.
//!
//! In every case the work hears of a lost or unknown lease exactly once — a worker actor as
//! a [`LeaseCancelled`] message, any work through [`LeaseContext::cancelled`]; under
//! [`CancelPolicy::Kill`] (the default) it is stopped when local validity ends; when it
//! ends, the lease is released at once (owner-checked), and [`LeaseReport`] says how.

mod cancel;
mod context;
mod drain;
mod job;
mod lease_actor;
mod registry;
mod report;
mod run;
mod spawn;
mod supervisor;

pub use cancel::{CancelPolicy, CancelReason, LeaseCancelled};
pub use context::{LeaseContext, LeaseStatus};
pub use drain::ShutdownSummary;
pub use job::{AttachedLease, LeaseJob, SpawnOutcome};
pub use lease_actor::is_lease_end;
pub use lease_actor::message::LeaseActorMsg;
pub use report::{JobEnd, LeaseReport};
pub use run::RunOutcome;
pub use spawn::{LeaseRuntime, RuntimeError};
pub use supervisor::{
    LeaseSupervisor, SupervisorConfig, SupervisorMsg, SupervisorState, SupervisorSummary,
};
