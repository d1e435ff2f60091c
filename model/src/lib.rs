//! leasehold's lease protocol as a model, checked exhaustively with `stateright`.
//!
//! The model holds one resource (a plain lease, or a counted one of N slots) and its line
//! of waiters on a Redis node with its replica, two or three clients (waiting or trying)
//! with their attempts and handles, a real clock in ticks, and the faults leasehold's
//! promises are made against: lost and late replies, expiry, eviction of the fence
//! counter, `FLUSHALL`, and a failover to a replica that missed the last writes and whose
//! clock is behind. Every action that reaches the server runs one branch of a
//! `lua/*.lua` script or one native command (README.md), the line's (W, K) included
//! (`lua/line.lua`).
//!
//! Assumptions the properties rest on, stated where the code makes them:
//! * drift (`client.rs`): each client's clock runs at the server's rate within the drift
//!   budget over a lease term;
//! * the TIME floor (`Config::time_past_counter`): after any fault, either the fence
//!   counter still holds the largest token issued or the node's clock is past it;
//! * (a) holds while the server keeps its acknowledged writes (a flush or a failover that
//!   lost writes breaks it, which is what `ReplicaWait` narrows) and while no promoted
//!   replica's clock is ahead of its old primary's (`Config::replica_ahead`).

pub mod client;
pub mod config;
pub mod line;
pub mod model;
mod native;
pub mod properties;
pub mod replay;
pub mod server;
pub mod state;
mod step;

pub use config::{Bugs, Config};
pub use model::{Acquisition, Action, LeaseModel};
pub use properties::{check, counterexample};
