//! The line's order when the server's clock is behind the line's scores: after a failover
//! to a replica whose clock is behind, the waiters already in the line joined "in the
//! future" of the node that now serves them.

use leasehold::fuzzing::{AcquireReply, calls};

use super::*;

/// A waiter joins behind every entry already in the line, even entries scored ahead of
/// the server's `TIME` (lua/line.lua scores a join `max(tail's score + 1, TIME)`).
#[tokio::test]
async fn a_newcomer_joins_behind_entries_scored_ahead_of_the_servers_clock() {
    let server = RedisServer::start();
    let holder = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let _held = acquired(&holder, &request(&holder, "ordered")).await;
    let keys = holder.keys(
        &Purpose::new("redis").unwrap(),
        &ResourceDigest::of("ordered"),
    );
    let line = calls::line_key(&keys);
    // A waiter that joined on a primary whose clock was a minute ahead of this one's, and
    // whose session keeps it alive.
    let time: Vec<String> = server.query(&["TIME"]);
    let now_us: u64 = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let earlier = "00000000000000aa0000000000000001";
    let score = (now_us + 60_000_000).to_string();
    server.cmd(&["ZADD", &line, &score, earlier]);
    server.cmd(&[
        "SET",
        &format!("{line}:00000000000000aa"),
        "1",
        "PX",
        "60000",
    ]);

    let waiter = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let req = LeaseRequest::builder(
        Purpose::new("redis").unwrap(),
        ResourceDigest::of("ordered"),
        waiter.new_attempt("newcomer").unwrap(),
    )
    .ttl(Duration::from_secs(30))
    .wait_timeout(Duration::from_secs(60))
    .build()
    .unwrap();
    let backend = RedisBackend::new(RedisConfig::new(server.url())).unwrap();
    let reply = calls::acquire_waiting(&backend, &keys, &req, LONG_TIMEOUT).await;
    assert!(
        matches!(reply, Ok(AcquireReply::Contended { rank: Some(1), .. })),
        "the newcomer should be second in line, behind the earlier waiter: {reply:?}"
    );
    let members: Vec<String> = server.query(&["ZRANGE", &line, "0", "-1"]);
    assert_eq!(members.len(), 2, "{members:?}");
    assert_eq!(
        members[0], earlier,
        "the earlier waiter stays first: {members:?}"
    );
}
