//! Run work under a Redis lease.
//!
//! # A lease is not a lock
//!
//! A lease is a time-bounded, owner-checked claim on one resource, held in Redis and renewed
//! while work runs. It does **not** prove mutual exclusion: a process paused by a GC, a
//! stopped VM or a slow disk can resume after its lease expired and someone else took it.
//! leasehold makes leases useful anyway, in two ways:
//!
//! 1. **It tells the holder, as an outcome, the moment the lease can no longer be vouched
//!    for.** Every operation returns an enum whose variants say how certain the library is:
//!    only `Unavailable` promises nothing happened; anything that might have reached Redis
//!    is `Indeterminate`. A handle that is LOST, RELEASED or UNKNOWN refuses to renew.
//! 2. **Every acquisition carries a [`FencingToken`]** that strictly increases per resource,
//!    so the place where the effect lands (a row, a key, an API) can refuse a stale holder.
//!
//! # Which clock is trusted
//!
//! Only this process's monotonic clock, and only what the server said. Local validity is
//! measured from the instant just **before** the command was sent, for the TTL the server
//! set (or, on a replay, the PTTL it reported), minus a drift budget:
//!
//! ```text
//! valid_until = sent_at + min(granted, ttl) − drift_budget
//! ```
//!
//! Reaching `valid_until` moves the handle to LOST, and it stays there.
//!
//! # Layers
//!
//! | layer | where | what | may import |
//! |---|---|---|---|
//! | cli | `cli/src/` | the `leasehold` binary (`run`, `inspect`, `list`, `doctor`, `completions`, `man`), package `leasehold-cli` | runtime, lease core, backend, protocol, telemetry, error |
//! | runtime | `src/runtime/` | [`LeaseRuntime`](runtime::LeaseRuntime), lease actors ([`LeaseActorMsg`](runtime::LeaseActorMsg)), `LeaseSupervisor` | lease core, protocol, telemetry, error, jitter, simulation, backend (`FailureDetail` and `FailureKind` only: the detail an outcome carries) |
//! | lease core | `src/lease/` | [`LeaseClient`], [`LeaseHandle`], outcomes, validity, wait loop | protocol, telemetry, error, jitter, backend (`LeaseBackend`, `MemoryBackend`, `RedisBackend`, `RedisConfig`, `FailureDetail`, `FailureKind`, what a backend's operations answer: `SendFailure`, `ReplicatedReply`, `ReleaseNotices`, `KeyPages`, and a renewal's bound, `RenewBound`) |
//! | backend | `src/backend/` | [`LeaseBackend`], [`RedisBackend`] (`lua/*.lua`), [`MemoryBackend`] | protocol, error, simulation (`store_now`: the in-memory store's clock) |
//! | protocol | `src/protocol/` | [`protocol`]: keys, digests, attempts, requests, typed replies (pure) | error |
//! | telemetry | `src/telemetry.rs` | [`telemetry`]: metric names and what records them | protocol |
//! | error | `src/error.rs` | [`LeaseError`]: a value refused before any I/O | nothing |
//! | jitter | `src/jitter.rs` | the random part of waits and pauses | simulation |
//! | simulation | `src/simulation.rs` | with the `__simulation` feature only: the deterministic simulation's hooks (seeded jitter, renewal grid, the store's shared clock, deliberate bugs) | nothing |
//!
//! "May import" is checked, not only stated: `tests/layers/` reads this table and fails
//! when a layer's code names (`crate::…`, in the binary `leasehold::…`) a layer, or an item
//! of one, that its row does not list — and, within the library and within the binary,
//! when a file names a module that names it back, however many steps around (an
//! acquisition's outcome holds a handle, so it lives beside the acquisition, above the
//! handle).
//!
//! What a caller names every day is at the crate root, whatever its layer; [`runtime`],
//! [`protocol`] (the request's builder, the bounds in [`protocol::limits`]) and
//! [`telemetry`] hold the rest. Each item has one path. A backend's operations and the
//! scripts' replies are the crate's own: a caller holds a lease through [`LeaseClient`]
//! and [`LeaseHandle`], and reads outcomes.
//!
//! # `try_acquire` vs `acquire`
//!
//! [`LeaseClient::try_acquire`] sends one acquisition and returns what Redis said.
//! [`LeaseClient::acquire`] repeats it until the request's `wait_timeout` runs out: it
//! sleeps on `Contended` (waking early when the holder releases), replays `Indeterminate`
//! with the same attempt, and backs off on `Unavailable`. With `wait_timeout` 0 (the
//! default) the two are the same, but for a grant whose reply came after its local
//! validity had ended: `acquire` hands out no such handle (`Indeterminate`).
//!
//! # `run_under_lease` vs `spawn_under_lease`
//!
//! Both hold the lease in a ractor actor that renews it, tells the work once when it can no
//! longer be vouched for, stops it (under [`CancelPolicy::Kill`](runtime::CancelPolicy)) when
//! local validity ends, and releases it when the work ends.
//! [`run_under_lease`](runtime::LeaseRuntime::run_under_lease) runs a plain future, as a
//! task the lease actor supervises (one actor per lease), and returns its output; the
//! future watches [`LeaseContext::cancelled`](runtime::LeaseContext::cancelled).
//! [`spawn_under_lease`](runtime::LeaseRuntime::spawn_under_lease) runs a worker actor,
//! which receives a typed [`LeaseCancelled`](runtime::LeaseCancelled) message and can be
//! part of a supervision tree.
//!
//! # Running inside a service
//!
//! * **Supervision tree.** [`supervise_linked`](runtime::LeaseRuntime::supervise_linked)
//!   runs a [`LeaseSupervisor`](runtime::LeaseSupervisor) (leader election: one job kept
//!   running under one lease across losses) as a child of the application's own supervisor
//!   actor; its failure reaches that supervisor, and stopping it stops the term and
//!   releases the lease. Its memory does not grow with its terms.
//! * **Drain on SIGTERM.** [`LeaseRuntime::shutdown`](runtime::LeaseRuntime::shutdown)
//!   cancels every job, waits for them within a grace period, releases every lease (waiters
//!   elsewhere wake on the release notice) and refuses new ones; example `drain_on_sigterm`.
//! * **Observing the leader.** [`LeaseClient::observe`] reports who holds a resource —
//!   its token and [`HolderLabel`] — each time that changes; [`LeaseClient::list`] (and
//!   `leasehold list`) shows every lease held in a namespace; example `leader`.
//!
//! # Beyond a lock
//!
//! * **At most N at once.** [`LeaseRequestBuilder::permits`](protocol::LeaseRequestBuilder::permits)
//!   makes a counted lease: up to N holders, each in a slot of its own with everything a
//!   lease has — its own fencing token (increasing across all slots), renewal, loss,
//!   release; the runtime works on it unchanged and tells the worker its slot
//!   ([`LeaseContext::slot`](runtime::LeaseContext::slot)). Example `pool`.
//! * **Lock-delay.** [`LeaseRequestBuilder::lock_delay`](protocol::LeaseRequestBuilder::lock_delay):
//!   after a lease ends without a release (its holder crashed, was partitioned or paused),
//!   the resource refuses holders for the delay, and says so
//!   ([`AcquireOutcome::LockDelayed`]); a release skips it.
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `tls` | yes | `rediss://` URLs, over rustls with the ring provider |
//! | `fuzzing` | no | not for users, no stability promise: the script level — reply decoders, one backend operation at a time, a handle's holding — for the fuzz targets, the model's conformance replay and the backend tests |
//! | `__simulation` | no | not for users, no stability promise: the deterministic simulation's hooks (inert unless a thread turns them on) |
//!
//! The library itself needs tokio's `rt`, `time`, `sync` and `macros`; the application
//! chooses its runtime flavour. The `leasehold` binary is the package `leasehold-cli`
//! (`cargo install leasehold-cli`), so a library dependency carries none of its crates.
//!
//! # Examples
//!
//! Each runs in memory, or on Redis with `LEASEHOLD_REDIS_URL=redis://…`
//! (`cargo run --example NAME`):
//!
//! * `quickstart`: acquire a lease, renew it, use its fencing token, release it.
//! * `supervised_job`: a worker actor under a lease; a waiter takes over when the lease is
//!   deleted behind the holder's back.
//! * `leader`: three candidates elect a leader, hand over on step-down, and an observer
//!   names each leader.
//! * `fenced_write`: a stale holder's write refused by the fencing token at the target.
//! * `pool`: a counted lease — six exports, at most two at a time, each with its own
//!   fencing token.
//! * `drain_on_sigterm`: a service drains its partitions on SIGTERM and its successor takes
//!   them over at once.
//! * `observed_worker` (in the `leasehold-cli` package, which has the Prometheus exporter:
//!   `cargo run -p leasehold-cli --example observed_worker`): metrics of a lease through a
//!   fault, scraped as Prometheus text.
//!
//! # Quickstart
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), leasehold::LeaseError> {
//! use leasehold::*;
//!
//! let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
//! let request = LeaseRequest::builder(
//!     Purpose::new("billing")?,
//!     ResourceDigest::of(b"account-42"), // hashed here; the raw id never leaves
//!     client.new_attempt("invoice-run-7")?,
//! )
//! .ttl(std::time::Duration::from_secs(30))
//! .build()?;
//!
//! let AcquireOutcome::Acquired(mut lease) = client.acquire(&request).await? else {
//!     return Ok(()); // contended, unavailable, indeterminate: each says what to do
//! };
//! let token = lease.token(); // send with every write the lease protects
//! match lease.renew().await {
//!     RenewOutcome::Renewed { .. } => { /* keep working */ }
//!     other => println!("stop working: {}", other.as_str()),
//! }
//! assert_eq!(lease.release().await, ReleaseOutcome::Released);
//! # let _ = token; Ok(()) }
//! ```

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod error;
mod jitter;
mod lease;
pub mod protocol;
pub mod runtime;
pub mod telemetry;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use backend::fuzzing;
#[cfg(feature = "__simulation")]
#[doc(hidden)]
#[path = "simulation.rs"]
pub mod __simulation;
#[cfg(feature = "__simulation")]
use __simulation as simulation;
pub use backend::{
    FailureDetail, FailureKind, LeaseBackend, MemoryBackend, MemoryFault, RedisBackend,
    RedisConfig, ServerCapabilities,
};
pub use error::{DurationProblem, LeaseError};
pub use lease::{
    AcquireOutcome, ENV_VARS, InspectOutcome, LeaseClient, LeaseHandle, LeaseObserver,
    LeaseReading, LeaseSettings, LeaseState, ListCoverage, ListOutcome, ListedLease, ListedSlot,
    LostReason, REDIS_URL_ENV, ReleaseOutcome, RenewOutcome, Replication, ResourceHolder,
};
// The protocol's vocabulary a caller names every day lives here, at the root, only.
pub use protocol::attempt::{Attempt, OperationId, OwnerToken};
pub use protocol::digest::ResourceDigest;
pub use protocol::fencing::FencingToken;
pub use protocol::holder::HolderLabel;
pub use protocol::keys::LeaseKeys;
pub use protocol::names::{Namespace, Purpose};
pub use protocol::request::LeaseRequest;

/// The [ractor](https://docs.rs/ractor) leasehold's runtime is built on: name worker actors'
/// traits and types through it (`use leasehold::ractor::{Actor, ActorRef};`), so they are
/// always the version leasehold's actors speak to.
///
/// leasehold depends on it without its default `message_span_propogation` feature. A
/// dependency of your own on `ractor` with default features turns that feature on for every
/// actor in the build — leasehold's lease actors included, each larger for it
/// (docs/performance.md, "Memory"); add it with `default-features = false, features =
/// ["tokio_runtime"]` unless your workers need it.
pub use ractor;

/// The README's Rust examples, compiled as doc tests (`no_run`: they need a Redis server).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The guides' Rust examples, compiled as the README's are. Their shell, ini, yaml and text
/// blocks name their language, so rustdoc leaves them alone (a block that names none would
/// be compiled as Rust).
#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
struct CliGuideDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
struct LibraryGuideDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/production.md")]
struct ProductionGuideDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/faq.md")]
struct FaqDoctests;
