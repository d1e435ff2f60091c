//! What the entry-point tests share: a runtime on `MemoryBackend` and a request on one
//! resource, with a TTL of [`TTL`].

use std::time::Duration;

use leasehold::runtime::LeaseRuntime;
use leasehold::*;

pub const TTL: Duration = Duration::from_secs(3);

pub fn runtime() -> (LeaseRuntime, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (LeaseRuntime::new(client), backend)
}

pub fn request(rt: &LeaseRuntime, wait: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("entry").unwrap(),
        ResourceDigest::of("r"),
        rt.client().new_attempt("op").unwrap(),
    )
    .ttl(TTL)
    .wait_timeout(wait)
    .build()
    .unwrap()
}

/// The keys of [`request`]'s lease.
pub fn keys(rt: &LeaseRuntime) -> LeaseKeys {
    rt.client()
        .keys(&Purpose::new("entry").unwrap(), &ResourceDigest::of("r"))
}
