//! Redis Sentinel: `RedisConfig::sentinel` finds the primary through the sentinels, follows
//! it across failovers, and stays honest about what may have happened. Every test runs real
//! processes (`common::sentinel`) and asserts both what the API reported and what the data
//! nodes hold afterwards.
//!
//! Tests that block in the harness while the backend's `+switch-master` watcher must run
//! use a multi-thread runtime: on a current-thread runtime the watcher could not run until
//! the test yields.
//!
//! Writes landing on the primary and its replicas are in `replication`, failovers in
//! `failover`, sentinels and nodes that cannot be reached in `unreachable`, and
//! configurations refused before any I/O in `config`.

#[path = "../common/mod.rs"]
mod common;
mod config;
mod failover;
mod replication;
mod unreachable;

use std::time::Duration;

use common::RedisServer;
use common::leases::acquired;
use common::sentinel::query;
use leasehold::*;

fn request(client: &LeaseClient, resource: &str, op: &str) -> LeaseRequest {
    common::leases::request(client, "sentinel", resource, op)
}

/// Acquires and releases `resource` `times` times; the tokens issued.
async fn churn(client: &LeaseClient, resource: &str, times: usize) -> Vec<FencingToken> {
    let mut tokens = Vec::new();
    for i in 0..times {
        let mut lease = acquired(client, &request(client, resource, &format!("churn-{i}"))).await;
        tokens.push(lease.token());
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    tokens
}

// Reads on a new connection each: a failover's `CLIENT KILL` breaks cached ones.
fn exists(node: &RedisServer, key: &str) -> bool {
    query::<i64>(node, &["EXISTS", key]) == 1
}

fn pttl(node: &RedisServer, key: &str) -> Duration {
    let ms: i64 = query(node, &["PTTL", key]);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Shortens the lease's server TTL to 5 s, so a renewal's reset is visible.
fn shorten(node: &RedisServer, key: &str) {
    let set: i64 = query(node, &["PEXPIRE", key, "5000"]);
    assert_eq!(set, 1, "the key exists on node {}", node.port());
}

fn settings_with_timeout(command_timeout: Duration) -> LeaseSettings {
    LeaseSettings::default()
        .with_command_timeout(command_timeout)
        .with_connect_timeout(Duration::from_secs(1))
}
