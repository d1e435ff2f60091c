//! Support code for the CLI's integration tests (`mod common;`): the library's test harness
//! (the real `redis-server`, the loopback proxy, the fault lines; `tests/common` at the
//! workspace root, shared rather than copied) and what only the CLI's tests use.
//!
//! * [`cli`]: the `leasehold` binary run under test, its output and its exit status.
//! * [`observe`]: what Redis holds while a command runs; a CPU load for busy-machine runs.
//! * [`pids`]: a process by PID: signals, liveness, what it catches.
//! * [`output`], [`tree`], [`witness`]: a run's streamed output, its process tree, and the
//!   timestamps every process of a tree writes to prove no two holders overlap.

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
mod shared;
pub use shared::*;

pub mod cli;
pub mod observe;
pub mod output;
pub mod pids;
pub mod tree;
pub mod witness;
