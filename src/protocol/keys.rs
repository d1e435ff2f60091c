//! Key layout: `{namespace}:lease:v1:{purpose}:{<hex digest>}` plus companions.
//!
//! The braces around the digest are a Redis Cluster hash tag: the lease key, its fence
//! counter and its release channel hash to one slot, so one script can touch them atomically.

use crate::protocol::{Namespace, Purpose, ResourceDigest};

/// The Redis names one lease uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseKeys {
    /// The lease itself: a hash `{o: owner, p: operation, t: token}` with a PX expiry.
    pub lease: String,
    /// The fencing counter: the last token issued for this resource, never expires.
    pub fence: String,
    /// Pub/sub channel on which a release is announced, so waiters wake early.
    pub release_channel: String,
}

impl LeaseKeys {
    /// The keys for one (namespace, purpose, resource).
    pub fn new(namespace: &Namespace, purpose: &Purpose, resource: &ResourceDigest) -> Self {
        let lease = format!("{namespace}:lease:v1:{purpose}:{{{}}}", resource.hex());
        Self {
            fence: format!("{lease}:fence"),
            release_channel: format!("{lease}:released"),
            lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_uses_the_digest_as_hash_tag() {
        let d = ResourceDigest::of(b"r");
        let keys = LeaseKeys::new(&Namespace::default(), &Purpose::new("jobs").unwrap(), &d);
        let tag = format!("{{{}}}", d.hex());
        assert_eq!(keys.lease, format!("leasehold:lease:v1:jobs:{tag}"));
        assert_eq!(keys.fence, format!("leasehold:lease:v1:jobs:{tag}:fence"));
        for k in [&keys.lease, &keys.fence, &keys.release_channel] {
            // Exactly one `{…}`, holding the digest: that is what Redis Cluster hashes.
            assert_eq!(k.matches('{').count(), 1);
            assert!(k.contains(&tag));
        }
    }
}
