//! Lease core: the client, the handle and its state machine, outcomes, validity, the wait
//! loop. Imports [`crate::protocol`], [`crate::telemetry`], the error type and, of the
//! backend, the trait, the failure types, the two backends' constructors for convenience
//! and what a backend's operations answer (the crate docs' layer table lists them) —
//! never a concrete backend's internals.

mod acquire;
mod client;
mod handle;
mod line_keeper;
mod line_places;
mod list;
mod observe;
mod outcome;
mod release;
mod renewal;
mod session;
mod settings;
mod state;
mod trace;
pub(crate) mod validity;
mod variables;
mod wait;

pub use acquire::AcquireOutcome;
pub use client::LeaseClient;
pub use handle::LeaseHandle;
pub use list::{ListCoverage, ListOutcome, ListedLease, ListedSlot};
pub use observe::{LeaseObserver, ResourceHolder};
pub use outcome::{
    InspectOutcome, LeaseReading, LeaseState, LostReason, ReleaseOutcome, RenewOutcome, Replication,
};
pub(crate) use renewal::{RenewReach, RenewSent, Renewal};
pub use settings::LeaseSettings;
pub use variables::{ENV_VARS, REDIS_URL_ENV};
pub(crate) use wait::Patience;
