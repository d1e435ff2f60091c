//! Protocol layer: keys, digests, attempts, requests and typed replies.
//!
//! Pure: no async, no I/O, no clock reads. It is the leaf of the dependency graph; every other
//! layer may import it, it imports nothing of leasehold but the crate's error type.

mod attempt;
mod digest;
mod fencing;
mod holder;
mod keys;
pub mod limits;
mod names;
mod reply;
mod request;

pub use attempt::{Attempt, OperationId, OwnerToken};
pub use digest::ResourceDigest;
pub use fencing::FencingToken;
pub use holder::HolderLabel;
pub use keys::LeaseKeys;
pub use names::{Namespace, Purpose};
pub use reply::{AcquireReply, InspectReply, ReleaseReply, RenewReply};
pub use request::{LeaseRequest, LeaseRequestBuilder, ReplicaWait};
