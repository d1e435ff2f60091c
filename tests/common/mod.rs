//! Shared support code for the integration tests (`mod common;`).
//!
//! * [`RedisServer`]: a real `redis-server` process owned by one test.
//! * [`Proxy`]: a loopback TCP proxy whose behaviour the test switches while
//!   connections are open (delay, drop replies, black hole, reset, refuse).
//! * [`fault::FaultLine`]: the one `FAULT row=… injected=…` line a fault-matrix test
//!   prints for `.ci/fault-report`.
//!
//! `RedisServer` and `Proxy` run on std threads / OS processes only, so they are
//! independent of the test's tokio runtime (including paused tokio time).

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

pub mod entry;
pub mod proxy;
pub mod redis_server;
pub mod workers;

pub use proxy::{Proxy, ProxyMode};
pub use redis_server::RedisServer;
pub mod backends;
pub mod cluster;
pub mod fault;
pub mod leases;
pub mod sentinel;
