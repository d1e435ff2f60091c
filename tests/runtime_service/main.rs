//! Embedding the runtime in a long-running service: the drain on SIGTERM (`drain`), a
//! service's own supervision tree around lease actors (`embedding`), and the lease
//! supervisor as an actor of that tree (`supervisor`); an acquisition of unknown end
//! settled by its replay (`unknown_end`).

#[path = "../common/mod.rs"]
mod common;

mod app;
mod drain;
mod embedding;
mod supervisor;
mod supervisor_redis;
mod unknown_end;
