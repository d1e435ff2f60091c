//! docs/design.md §9: tracing spans carry purpose, digest prefix (12 hex), operation id,
//! outcome and latency — never the owner token, never a raw resource id. §3: raw resource
//! ids never reach `Debug` output, and `Debug`/`Display` redact the owner token.
//!
//! Each test installs a `tracing_subscriber::fmt` subscriber at TRACE (span open and close
//! events included) writing into a shared buffer, drives every operation and outcome it can
//! reach, prints `{:?}` (and `Display` where there is one) of attempts, requests, handles,
//! outcomes and errors into the same buffer, and then searches the whole text for secrets.
//!
//! The capture is in `capture`, the owner tokens and the checks on the captured text in
//! `redaction`, the driver that prints every result in `run`, and the operations it
//! drives on either backend in `scenario`.

mod capture;
#[path = "../common/mod.rs"]
mod common;
mod redaction;
mod run;
mod scenario;

use std::time::Duration;

use capture::{Capture, install};
use common::backends::Harness;
use leasehold::*;
use redaction::{Secrets, assert_redacted};
use run::Run;
use scenario::scenario;

/// A raw resource id distinctive enough that any occurrence in the log is a leak.
const RAW_ID: &str = "raw-customer-id-4711";

#[tokio::test(start_paused = true)]
async fn memory_spans_and_debug_output_carry_no_owner_token_or_raw_id() {
    let capture = Capture::default();
    let secrets = Secrets::default();
    {
        let _guard = install(&capture);
        let harness = Harness::memory();
        scenario(&harness, &capture, &secrets).await;
    }
    assert_redacted(&capture.text(), &secrets.all(), &ResourceDigest::of(RAW_ID));
}

#[tokio::test]
async fn redis_spans_and_debug_output_carry_no_owner_token_or_raw_id() {
    let capture = Capture::default();
    let secrets = Secrets::default();
    {
        let _guard = install(&capture);
        let harness = Harness::redis();
        scenario(&harness, &capture, &secrets).await;
    }
    assert_redacted(&capture.text(), &secrets.all(), &ResourceDigest::of(RAW_ID));
}

/// `{:?}` of a `LeaseClient` (which prints its backend) while it holds a lease.
async fn client_debug_while_held(harness: Harness) {
    let secrets = Secrets::default();
    let capture = Capture::default();
    let _guard = install(&capture); // see `install`: every test thread has a subscriber
    let run = Run {
        harness: &harness,
        log: &capture,
        secrets: &secrets,
        purpose: Purpose::new("billing").unwrap(),
        resource: ResourceDigest::of(RAW_ID),
    };
    let request = run.request(&harness.client, "invoice-run-7", Duration::ZERO);
    let mut lease = run.held(&harness.client, &request, "acquired").await;
    let text = format!("{:?}", harness.client);
    let _ = lease.release().await;
    for owner in secrets.all() {
        assert!(
            !text.contains(&owner),
            "LEAK: `{{:?}}` of LeaseClient prints the owner token: {text}"
        );
    }
    assert!(!text.contains(RAW_ID), "LEAK: raw id in {text}");
    assert!(
        !text.contains(&run.resource.hex()),
        "LEAK: `{{:?}}` of LeaseClient prints the full 64-hex digest: {text}"
    );
}

/// Regression test. `MemoryBackend` used to derive `Debug`, printing its whole store — every
/// live lease's `Entry { owner: "<owner token in clear>", .. }` and the lease keys with the
/// full 64-hex digest — and `LeaseClient`'s `Debug` prints its backend, so `{client:?}` on a
/// memory-backed client leaked every owner token it held. Fixed in 051f7f2 (a hand-written
/// `Debug` that prints counts only).
#[tokio::test(start_paused = true)]
async fn memory_client_debug_does_not_print_owner_tokens() {
    client_debug_while_held(Harness::memory()).await;
}

#[tokio::test]
async fn redis_client_debug_does_not_print_owner_tokens() {
    client_debug_while_held(Harness::redis()).await;
}
