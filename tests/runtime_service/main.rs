//! Embedding the runtime in a long-running service: the drain on SIGTERM (`drain`), and a
//! service's own supervision tree around lease actors (`embedding`).

#[path = "../common/mod.rs"]
mod common;

mod drain;
mod embedding;
