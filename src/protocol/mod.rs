//! Protocol layer: keys, digests, attempts, requests and typed replies.
//!
//! Pure: no async, no I/O, no clock reads. It is the leaf of the dependency graph; every other
//! layer may import it, it imports nothing of leasehold but the crate's error type.
//!
//! What a caller names every day — [`LeaseRequest`], [`Purpose`], [`ResourceDigest`],
//! [`FencingToken`], [`LeaseKeys`]… — is at the crate root. Here: the request's builder
//! and its replica wait, the scripts' typed replies (what
//! [`LeaseBackend`](crate::LeaseBackend)'s methods answer), and the bounds ([`limits`]).

pub(crate) mod attempt;
pub(crate) mod digest;
pub(crate) mod fencing;
pub(crate) mod holder;
pub(crate) mod holding;
pub(crate) mod keys;
pub mod limits;
pub(crate) mod names;
mod reply;
pub(crate) mod request;

pub(crate) use attempt::{Attempt, OperationId};
pub(crate) use digest::ResourceDigest;
pub(crate) use fencing::FencingToken;
pub(crate) use holder::HolderLabel;
pub(crate) use holding::Holding;
pub(crate) use keys::LeaseKeys;
pub(crate) use names::{Namespace, Purpose};
pub use reply::{AcquireReply, InspectReply, ReleaseReply, RenewReply};
pub(crate) use request::LeaseRequest;
pub use request::{LeaseRequestBuilder, ReplicaWait};
