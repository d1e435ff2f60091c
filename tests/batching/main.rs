//! Concurrent operations on one `RedisBackend` travel together, as one script call per round
//! trip. What a batch must not change: each operation's own outcome, its certainty
//! (`Unavailable` only for what never ran), and its fencing. Each test asserts what the API
//! reported and what Redis holds afterwards. (The whole contract suite also runs with every
//! operation batched: `backend_contract::redis_batched`.)
//!
//! How operations come to share a call is in `calls`; what sharing must not change, each
//! operation's own outcome and fencing in `outcomes` and its certainty in `certainty`.

mod burst;
mod calls;
mod certainty;
#[path = "../common/mod.rs"]
mod common;
mod monitor;
mod outcomes;

use std::time::{Duration, Instant};

use common::backends::redis_settings;
use common::leases::warm_up;
use common::{Proxy, ProxyMode, RedisServer};
use leasehold::*;

fn request(client: &LeaseClient, resource: &str, op: &str) -> LeaseRequest {
    common::leases::request(client, "batch", resource, op)
}

fn exists(server: &RedisServer, keys: &LeaseKeys) -> bool {
    server.query::<i64>(&["EXISTS", keys.lease()]) == 1
}

/// Script calls the server ran (`EVALSHA`).
fn script_calls(server: &RedisServer) -> u64 {
    server.calls_of("evalsha")
}

/// Calls the server ran: script calls, and pipelines of its own commands (on a server that
/// renews and releases by them: each ends with one `PING`).
fn calls(server: &RedisServer) -> u64 {
    script_calls(server) + server.calls_of("ping")
}

/// Waits until the server has run `calls` script calls in all.
async fn until_script_calls(server: &RedisServer, calls: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while script_calls(server) < calls {
        assert!(
            Instant::now() < deadline,
            "the server never ran call {calls}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A warmed-up client through a proxy that, from now on, drops every reply: each script
/// call runs and its caller never hears back. Returns the script calls run so far.
async fn replies_dropped(timeout_ms: u64) -> (RedisServer, Proxy, LeaseClient, u64) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let settings = redis_settings().with_command_timeout(Duration::from_millis(timeout_ms));
    let client = LeaseClient::redis(&proxy.url(), settings).unwrap();
    warm_up(&client).await;
    let base = script_calls(&server);
    proxy.set_mode(ProxyMode::DropReplies);
    (server, proxy, client, base)
}

fn spawn_acquire(
    client: &LeaseClient,
    req: &LeaseRequest,
) -> tokio::task::JoinHandle<AcquireOutcome> {
    let (client, req) = (client.clone(), req.clone());
    tokio::spawn(async move { client.try_acquire(&req).await.unwrap() })
}
