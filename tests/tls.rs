//! `rediss://` end to end, on a real redis-server that speaks only TLS
//! (`RedisServer::start_tls`: `--port 0 --tls-port P`, self-signed certificate).
//!
//! The redis crate selects no rustls crypto provider itself; `RedisBackend::new` installs
//! ring's when it sees a `rediss://` URL. These tests prove a lease can be acquired, renewed
//! and released over TLS, and that a plain-text client pointed at the TLS port gets an honest
//! failure outcome — not a panic, not a hang, and certainly not `Acquired`.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::backends::redis_settings;
use leasehold::*;

fn request(client: &LeaseClient) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("tls").unwrap(),
        ResourceDigest::of("tls-resource"),
        client.new_attempt("tls-op").unwrap(),
    )
    .ttl(Duration::from_secs(30))
    .build()
    .unwrap()
}

#[tokio::test]
async fn rediss_url_acquires_renews_and_releases() {
    let server = RedisServer::start_tls();
    let client = LeaseClient::redis(&server.tls_url(), redis_settings()).expect("valid url");
    let req = request(&client);
    let keys = client.keys(req.purpose(), req.resource());

    let mut lease = match client.try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(lease) => lease,
        other => panic!("expected Acquired over TLS, got {other:?}"),
    };
    // The harness's own connection is TLS as well: the key is really in this server.
    assert_eq!(server.query::<i64>(&["EXISTS", keys.lease()]), 1);
    let token = lease.token();

    let renewed = lease.renew().await;
    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "expected Renewed over TLS, got {renewed:?}"
    );
    assert_eq!(lease.state(), LeaseState::Active);

    // The same attempt again replays with the same token, on the same TLS connection.
    // Kept until the end: dropping it while ACTIVE would release the lease behind our back.
    let replayed = match client.try_acquire(&req).await.unwrap() {
        AcquireOutcome::Replayed(replayed) => replayed,
        other => panic!("expected Replayed over TLS, got {other:?}"),
    };
    assert_eq!(replayed.token(), token);

    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    assert_eq!(lease.state(), LeaseState::Released);
    assert_eq!(server.query::<i64>(&["EXISTS", keys.lease()]), 0);
    assert_eq!(client.inspect(&req).await, InspectOutcome::Absent);
    drop(replayed);
}

#[tokio::test]
async fn plain_redis_url_to_the_tls_port_is_not_acquired() {
    let server = RedisServer::start_tls();
    let settings = LeaseSettings::default().with_command_timeout(Duration::from_millis(500));
    // `url()` is `redis://127.0.0.1:P`: plain text to the TLS-only port.
    let client = LeaseClient::redis(&server.url(), settings).expect("valid url");
    let req = request(&client);

    let started = Instant::now();
    let outcome = client.try_acquire(&req).await.unwrap();
    let took = started.elapsed();
    eprintln!("plain text to the TLS port: {outcome:?} after {took:?}");
    assert!(
        matches!(
            outcome,
            AcquireOutcome::Unavailable { .. } | AcquireOutcome::Indeterminate { .. }
        ),
        "plain text to a TLS port must be Unavailable or Indeterminate, got {outcome:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "plain text to a TLS port took {took:?} to fail"
    );

    // Nothing was stored: the server never ran a command from the plain-text client.
    let keys = client.keys(req.purpose(), req.resource());
    assert_eq!(server.query::<i64>(&["EXISTS", keys.lease()]), 0);
    assert_eq!(server.query::<i64>(&["EXISTS", keys.fence()]), 0);
}

#[tokio::test]
async fn tls_server_harness_restarts_and_answers_over_tls() {
    let mut server = RedisServer::start_tls();
    assert!(server.is_tls());
    let before = server.pid();
    server.cmd(&["SET", "k", "v"]);
    server.restart();
    assert_ne!(server.pid(), before);
    // Non-persistent: the data is gone, and the harness reconnects over TLS.
    assert_eq!(server.query::<Option<String>>(&["GET", "k"]), None);
    assert_eq!(server.query::<String>(&["PING"]), "PONG");
}
