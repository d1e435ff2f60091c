//! The request and acquisition every real-Redis test starts from.

use std::time::Duration;

use leasehold::{AcquireOutcome, LeaseClient, LeaseHandle, LeaseRequest, Purpose, ResourceDigest};

/// A 30 s request for `resource` under `purpose`, by a fresh attempt of operation `op`.
pub fn request(client: &LeaseClient, purpose: &str, resource: &str, op: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new(purpose).expect("valid purpose"),
        ResourceDigest::of(resource),
        client.new_attempt(op).expect("valid operation id"),
    )
    .ttl(Duration::from_secs(30))
    .build()
    .expect("valid request")
}

/// `try_acquire` that must answer `Acquired`.
pub async fn acquired(client: &LeaseClient, req: &LeaseRequest) -> LeaseHandle {
    match client.try_acquire(req).await.expect("valid request") {
        AcquireOutcome::Acquired(h) => h,
        other => panic!("expected acquired, got {other:?}"),
    }
}

/// Connects `client` and loads the script: one acquisition and its release, so a fault
/// injected next hits the operation under test, not the handshake or `SCRIPT LOAD`.
pub async fn warm_up(client: &LeaseClient) {
    let mut warm = acquired(client, &request(client, "warm", "warm", "warm")).await;
    let _ = warm.release().await;
}

/// The lines of a batch script's reply (`lua/batch.lua`: one string, the call's id then
/// each item's reply, a line each), the id first.
pub fn batch_lines(reply: redis::Value) -> Vec<String> {
    let text = match reply {
        redis::Value::BulkString(b) => String::from_utf8(b).expect("a reply of text"),
        other => panic!("the batch script answers one string, not {other:?}"),
    };
    text.split('\n').map(str::to_owned).collect()
}

/// The script leasehold sends, assembled as `src/backend/redis/scripts.rs` does, for tests
/// that call it by hand (`EVAL`) to see exactly what Redis answers.
pub fn batch_script() -> String {
    [
        include_str!("../../lua/plain.lua"),
        include_str!("../../lua/owner.lua"),
        include_str!("../../lua/line.lua"),
        include_str!("../../lua/acquire.lua"),
        include_str!("../../lua/renew.lua"),
        include_str!("../../lua/release.lua"),
        include_str!("../../lua/inspect.lua"),
        include_str!("../../lua/batch.lua"),
    ]
    .join("\n")
}
