//! Protocol layer: keys, digests, attempts, requests and typed replies.
//!
//! Pure: no async, no I/O, no clock reads. It is the leaf of the dependency graph; every other
//! layer may import it, it imports nothing of leasehold but the crate's error type.
//!
//! What a caller names every day — [`LeaseRequest`], [`Purpose`], [`ResourceDigest`],
//! [`FencingToken`], [`LeaseKeys`]… — is at the crate root. Here: the request's builder
//! and its replica wait, and the bounds ([`limits`]). The scripts' typed replies and the
//! holding a renewal names are the crate's own: a caller reads outcomes instead.

pub(crate) mod attempt;
pub(crate) mod digest;
pub(crate) mod fencing;
pub(crate) mod holder;
pub(crate) mod holding;
pub(crate) mod keys;
pub mod limits;
pub(crate) mod line;
pub(crate) mod names;
pub(crate) mod reply;
pub(crate) mod request;

pub(crate) use attempt::{Attempt, OperationId};
pub(crate) use digest::ResourceDigest;
pub(crate) use fencing::FencingToken;
pub(crate) use holder::HolderLabel;
pub(crate) use holding::Holding;
pub(crate) use keys::LeaseKeys;
pub(crate) use line::{LINE_KEEP, LINE_KEEP_EVERY, LinePlace, LineSession, WaiterId};
pub(crate) use names::{Namespace, Purpose};
pub(crate) use reply::{AcquireReply, InspectReply, Inspected, ReleaseReply, RenewReply};
pub(crate) use request::LeaseRequest;
pub use request::{LeaseRequestBuilder, ReplicaWait};
