//! What must never reach the captured text — owner tokens, the raw resource id, the full
//! digest — and the spans and fields that must, checked in one place for every test.

use std::sync::Mutex;

use leasehold::*;

use crate::RAW_ID;

/// Every owner token the test has made; none may appear in the capture.
#[derive(Default)]
pub struct Secrets(Mutex<Vec<String>>);

impl Secrets {
    pub fn track(&self, attempt: &Attempt) {
        let token = attempt.owner().expose().to_owned();
        assert_eq!(token.len(), 32, "an owner token is 32 base64url characters");
        self.0.lock().unwrap().push(token);
    }

    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// The assertions of docs/design.md §9 on the captured text.
pub fn assert_redacted(text: &str, owners: &[String], resource: &ResourceDigest) {
    assert!(!text.is_empty(), "nothing was captured");
    assert!(!owners.is_empty(), "the test made no attempts");

    for span in [
        "lease.acquire",
        "lease.renew",
        "lease.release",
        "lease.inspect",
        "lease.wait",
    ] {
        assert!(
            text.contains(&format!("{span}{{")),
            "span {span} with fields is missing from the log:\n{text}"
        );
    }
    for field in ["purpose=", "digest=", "op_id=", "outcome=", "latency_us="] {
        assert!(
            text.contains(field),
            "field {field} is missing from the log:\n{text}"
        );
    }
    let short = resource.short();
    assert_eq!(short.len(), 12);
    assert!(
        text.contains(&format!("digest={short}")),
        "the digest field is not the 12-hex prefix {short}:\n{text}"
    );
    assert!(
        text.contains("released lease on drop"),
        "the drop-time release was not logged:\n{text}"
    );

    for (i, owner) in owners.iter().enumerate() {
        if let Some(at) = text.find(owner.as_str()) {
            panic!(
                "LEAK: owner token #{i} appears in the log at byte {at}:\n{}",
                context(text, at)
            );
        }
    }
    if let Some(at) = text.find(RAW_ID) {
        panic!(
            "LEAK: the raw resource id appears in the log at byte {at}:\n{}",
            context(text, at)
        );
    }
    let full = resource.hex();
    assert_eq!(full.len(), 64);
    if let Some(at) = text.find(&full) {
        panic!(
            "LEAK: the full 64-hex digest appears in the log at byte {at}:\n{}",
            context(text, at)
        );
    }
}

/// The line around byte `at`.
fn context(text: &str, at: usize) -> &str {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    &text[start..end]
}
