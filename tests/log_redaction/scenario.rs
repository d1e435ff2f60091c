//! Every operation and outcome reachable on a backend, in one scenario, so that each of
//! them has printed its result and logged its span before the text is searched.

use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use leasehold::*;

use crate::RAW_ID;
use crate::capture::Capture;
use crate::common::backends::{Backend, Fault, Harness};
use crate::redaction::Secrets;
use crate::run::Run;

/// Drives every operation and outcome reachable on `harness`, printing each result into
/// `log` and tracking each owner token in `secrets`. Lost replies come from
/// `Fault::LoseReplies` (memory: `MemoryFault::LoseReply`; Redis: the proxy drops replies);
/// `Unavailable` from `MemoryFault::Unavailable` on memory and a closed port on Redis. On
/// memory every outcome is asserted; on Redis a mismatch is only noted (`Run::expect`).
pub async fn scenario(harness: &Harness, log: &Capture, secrets: &Secrets) {
    let run = Run {
        harness,
        log,
        secrets,
        purpose: Purpose::new("billing").unwrap(),
        resource: ResourceDigest::of(RAW_ID),
    };
    log.debug("purpose", &run.purpose);
    log.debug("resource digest", &run.resource);
    let client = &harness.client;
    let other = harness.other_client();
    // Fault injection on Redis waits out command timeouts; keep them short there.
    let faulty = if harness.is_redis() {
        harness
            .client_with(LeaseSettings::default().with_command_timeout(Duration::from_millis(300)))
    } else {
        harness.other_client()
    };
    let keys = client.keys(&run.purpose, &run.resource);
    let zero = Duration::ZERO;

    // --- acquire: Acquired, Replayed, Contended, wait timeout, owner/operation conflict ---
    let req_a = run.request(client, "invoice-run-7", zero);
    let mut a = run
        .acquire(client, &req_a, Some("acquired"))
        .await
        .into_handle()
        .unwrap();
    log.debug("handle a", &a);
    log.debug("state", &a.state());
    log.debug("token", &a.token());
    let a_replayed = run
        .acquire(client, &req_a, Some("replayed"))
        .await
        .into_handle()
        .unwrap();
    log.debug("replayed handle", &a_replayed);
    // While leases are held: a client's `Debug` prints its backend.
    log.debug("client", client);
    log.debug("faulty client", &faulty);

    let req_b = run.request(&other, "invoice-run-8", zero);
    let _ = run.acquire(&other, &req_b, Some("contended")).await;
    let req_b_wait = run.request(&other, "invoice-run-8-wait", Duration::from_millis(300));
    let _ = run.acquire(&other, &req_b_wait, Some("contended")).await;

    let conflict = Attempt::from_parts(
        req_a.attempt().owner().clone(),
        OperationId::new("another-operation").unwrap(),
    );
    let req_conflict = run.request_with(conflict, zero);
    let _ = run
        .acquire(client, &req_conflict, Some("owner_operation_conflict"))
        .await;

    // --- inspect: held by this attempt, by another ---
    let _ = run
        .inspect(client, req_a.attempt(), Some("held_by_attempt"))
        .await;
    let _ = run
        .inspect(&other, req_b.attempt(), Some("held_by_other"))
        .await;

    // --- renew: Renewed; Lost after a DEL behind the holder's back; Refused ---
    let _ = run.renew(&mut a, Some("renewed")).await;
    harness.delete(&keys);
    let _ = run.renew(&mut a, Some("lost")).await;
    let _ = run.renew(&mut a, Some("refused")).await;
    let _ = run.release(&mut a, Some("already_absent")).await;
    let _ = run.inspect(client, req_a.attempt(), Some("absent")).await;

    // --- dropping ACTIVE handles: the drop-time release logs ---
    // The replayed handle is still ACTIVE locally; its key is gone (absent on drop).
    drop(a_replayed);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let req_c = run.request(client, "invoice-run-9", Duration::from_secs(1));
    let c = run
        .acquire(client, &req_c, Some("acquired"))
        .await
        .into_handle()
        .unwrap();
    log.debug("handle c", &c);
    drop(c); // ACTIVE and held: released on drop
    run.settle(&keys).await;
    let _ = run.inspect(client, req_c.attempt(), Some("absent")).await;

    // --- lost replies: acquire, wait, renew → UNKNOWN, inspect, release all Indeterminate ---
    // Each faulted call starts on a live connection (on Redis, a timed-out call drops its
    // connection, and reconnecting through a proxy that drops replies would be NotSent):
    // `restore` clears the fault and makes one ordinary call.
    let restore = |attempt: Attempt| {
        let faulty = faulty.clone();
        let run = &run;
        async move {
            harness.fault(Fault::None).await;
            let _ = run.inspect(&faulty, &attempt, None).await;
        }
    };
    let req_d = run.request(&faulty, "invoice-run-10", zero);
    let mut d = run.held(&faulty, &req_d, "acquired").await;
    let req_e = run.request(&faulty, "invoice-run-11", zero);
    let req_e_wait = run.request(&faulty, "invoice-run-11-wait", Duration::from_millis(300));

    harness.fault(Fault::LoseReplies).await;
    // Runs (contended: d holds it), but the reply is lost.
    let _ = run.acquire(&faulty, &req_e, Some("indeterminate")).await;
    restore(req_d.attempt().clone()).await;

    harness.fault(Fault::LoseReplies).await;
    let _ = run
        .acquire(&faulty, &req_e_wait, Some("indeterminate"))
        .await;
    restore(req_d.attempt().clone()).await;

    harness.fault(Fault::LoseReplies).await;
    let _ = run.renew(&mut d, Some("indeterminate")).await;
    log.debug("state after indeterminate renew", &d.state());
    let _ = run.renew(&mut d, Some("refused")).await;
    restore(req_d.attempt().clone()).await;

    harness.fault(Fault::LoseReplies).await;
    let _ = run
        .inspect(&faulty, req_d.attempt(), Some("indeterminate"))
        .await;
    restore(req_d.attempt().clone()).await;

    harness.fault(Fault::LoseReplies).await;
    // Runs (the key is deleted), but the reply is lost.
    let _ = run.release(&mut d, Some("indeterminate")).await;
    restore(req_d.attempt().clone()).await;

    harness.fault(Fault::LoseReplies).await;
    // Runs (e now holds the lease), but the reply is lost.
    let _ = run.acquire(&faulty, &req_e, Some("indeterminate")).await;
    restore(req_e.attempt().clone()).await;

    // d's release from UNKNOWN finds e's lease; the same attempt e replays its acquisition.
    let _ = run.release(&mut d, Some("not_owner")).await;
    drop(d);
    let mut e = run.held(&faulty, &req_e, "replayed").await;
    let _ = run.release(&mut e, Some("released")).await;

    // --- unavailable: nothing ran ---
    let (unavailable, memory) = match &harness.backend {
        Backend::Memory(m) => (harness.other_client(), Some(m.clone())),
        Backend::Redis { .. }
        | Backend::Batched { .. }
        | Backend::Sentinel(_)
        | Backend::Cluster(_) => {
            let port = {
                let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
                listener.local_addr().unwrap().port()
            };
            let url = format!("redis://127.0.0.1:{port}");
            (
                LeaseClient::redis(&url, LeaseSettings::default()).unwrap(),
                None,
            )
        }
    };
    // A handle that then cannot reach its backend (memory only: the fault is per backend).
    let mut g = match &memory {
        Some(_) => {
            let req_g = run.request(client, "invoice-run-13", zero);
            Some(run.held(client, &req_g, "acquired").await)
        }
        None => None,
    };
    if let Some(m) = &memory {
        m.set_fault(Some(MemoryFault::Unavailable));
    }
    let req_u = run.request(&unavailable, "invoice-run-14", zero);
    let _ = run.acquire(&unavailable, &req_u, Some("unavailable")).await;
    let req_u_wait = run.request(
        &unavailable,
        "invoice-run-14-wait",
        Duration::from_millis(100),
    );
    let _ = run
        .acquire(&unavailable, &req_u_wait, Some("unavailable"))
        .await;
    let _ = run
        .inspect(&unavailable, req_u.attempt(), Some("unavailable"))
        .await;
    if let Some(g) = g.as_mut() {
        let _ = run.renew(g, Some("unavailable")).await;
        let _ = run.release(g, Some("unavailable")).await;
    }
    if let Some(m) = &memory {
        m.set_fault(None);
    }
    if let Some(mut g) = g {
        let _ = run.release(&mut g, Some("released")).await;
    }

    // --- errors: local validation, before any I/O ---
    let too_short = client.new_attempt("too-short").unwrap();
    secrets.track(&too_short);
    let errors: Vec<LeaseError> = vec![
        Purpose::new("Not A Purpose!").unwrap_err(),
        // A caller passing the raw id where a digest text belongs must not see it echoed.
        ResourceDigest::parse(RAW_ID).unwrap_err(),
        ResourceDigest::parse(&format!("sha256:{RAW_ID}")).unwrap_err(),
        OperationId::new("has a space").unwrap_err(),
        LeaseClient::redis("nope://127.0.0.1:1", LeaseSettings::default()).unwrap_err(),
        LeaseRequest::builder(run.purpose.clone(), run.resource, too_short)
            .ttl(Duration::from_millis(1))
            .build()
            .unwrap_err(),
    ];
    for error in &errors {
        log.debug("error", error);
        log.display("error (display)", error);
    }
    log.debug("settings", client.settings());
}
