//! Lease core: the client, the handle and its state machine, outcomes, validity, the wait
//! loop. Imports [`crate::protocol`] and [`crate::backend`]; never a concrete backend's
//! internals (only the trait, plus constructors for convenience).

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

pub use client::{LeaseClient, REDIS_URL_ENV};
pub use handle::LeaseHandle;
pub use list::{ListCoverage, ListOutcome, ListedLease, ListedSlot};
pub use observe::{LeaseObserver, ResourceHolder, SlotHolder};
pub use outcome::{
    AcquireOutcome, InspectOutcome, LeaseState, LostReason, ReleaseOutcome, RenewOutcome,
    Replication,
};
pub use settings::{ENV_VARS, LeaseSettings};
pub(crate) use wait::Patience;
