//! Lease core: the client, the handle and its state machine, outcomes, validity, the wait
//! loop. Imports [`crate::protocol`], [`crate::telemetry`], the error type and, of the
//! backend, only what the crate root re-exports (the trait, the failure types, the two
//! backends' constructors for convenience) — never a concrete backend's internals.

mod acquire;
mod client;
mod handle;
mod list;
mod observe;
mod outcome;
mod release;
mod session;
mod settings;
mod state;
mod trace;
pub(crate) mod validity;
mod wait;

pub use acquire::AcquireOutcome;
pub use client::{LeaseClient, REDIS_URL_ENV};
pub use handle::LeaseHandle;
pub use list::{ListCoverage, ListOutcome, ListedLease, ListedSlot};
pub use observe::{LeaseObserver, ResourceHolder, SlotHolder};
pub use outcome::{
    InspectOutcome, LeaseState, LostReason, ReleaseOutcome, RenewOutcome, Replication,
};
pub use settings::{ENV_VARS, LeaseSettings};
pub(crate) use wait::Patience;
