//! Key layout (v2): `{namespace}:lease:v2:{purpose}:{<group>}:<hex digest>` plus companions.
//!
//! `<group>` is the first four hex digits of the digest (one of 65,536 groups). The braces
//! around it are a Redis Cluster hash tag: a lease key, its group's fence counter and its
//! release channel hash to one slot, so one script can touch them atomically.
//!
//! # Why a fence counter per group, not per resource
//!
//! The counter never expires (tokens must keep increasing after a lease expired). One
//! counter per resource would leave a key behind for every resource ever leased — without
//! bound for workloads that lease per job or per request. One counter per group bounds them
//! at 65,536 per (namespace, purpose) and keeps every guarantee: a token larger than every
//! token issued before in the group is larger than every token issued before for each of
//! its resources.

use crate::protocol::{Namespace, Purpose, ResourceDigest};

/// Hex digits of the digest that name a lease's group (its hash tag).
const GROUP_HEX_DIGITS: usize = 4;

/// The Redis names one lease uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseKeys {
    /// The lease itself: the string `"<owner token> <operation id> <fencing token>"` with a
    /// PX expiry.
    pub lease: String,
    /// The fencing counter of the lease's group: the last token issued to any lease of the
    /// group. Never expires.
    pub fence: String,
    /// Pub/sub channel on which a release is announced, so waiters wake early: the lease
    /// key followed by `:released` (`lua/release.lua` derives it by the same rule).
    pub release_channel: String,
}

impl LeaseKeys {
    /// The keys for one (namespace, purpose, resource).
    pub fn new(namespace: &Namespace, purpose: &Purpose, resource: &ResourceDigest) -> Self {
        let hex = resource.hex();
        let group = format!(
            "{namespace}:lease:v2:{purpose}:{{{}}}",
            &hex[..GROUP_HEX_DIGITS]
        );
        let lease = format!("{group}:{hex}");
        Self {
            fence: format!("{group}:fence"),
            release_channel: format!("{lease}:released"),
            lease,
        }
    }

    /// Pub/sub channel on which an acquisition is announced, for observers: the lease key
    /// followed by `:acquired` (`lua/acquire.lua` derives it by the same rule). Made on
    /// demand: only an observer subscribes to it.
    pub fn acquire_channel(&self) -> String {
        format!("{}:acquired", self.lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_uses_the_digest_group_as_hash_tag() {
        let d = ResourceDigest::of(b"r");
        let hex = d.hex();
        let keys = LeaseKeys::new(&Namespace::default(), &Purpose::new("jobs").unwrap(), &d);
        let tag = format!("{{{}}}", &hex[..4]);
        assert_eq!(keys.lease, format!("leasehold:lease:v2:jobs:{tag}:{hex}"));
        assert_eq!(keys.fence, format!("leasehold:lease:v2:jobs:{tag}:fence"));
        assert_eq!(keys.release_channel, format!("{}:released", keys.lease));
        for k in [&keys.lease, &keys.fence, &keys.release_channel] {
            // Exactly one `{…}`, holding the group: that is what Redis Cluster hashes.
            assert_eq!(k.matches('{').count(), 1);
            assert!(k.contains(&tag));
        }
    }

    #[test]
    fn resources_of_one_group_share_the_fence_counter_and_nothing_else() {
        let (ns, purpose) = (Namespace::default(), Purpose::new("jobs").unwrap());
        let a = ResourceDigest::parse(&format!("sha256:abcd{}", "0".repeat(60))).unwrap();
        let b = ResourceDigest::parse(&format!("sha256:abcd{}", "1".repeat(60))).unwrap();
        let c = ResourceDigest::parse(&format!("sha256:abce{}", "0".repeat(60))).unwrap();
        let (ka, kb, kc) = (
            LeaseKeys::new(&ns, &purpose, &a),
            LeaseKeys::new(&ns, &purpose, &b),
            LeaseKeys::new(&ns, &purpose, &c),
        );
        assert_eq!(ka.fence, kb.fence);
        assert_ne!(ka.fence, kc.fence);
        assert_ne!(ka.lease, kb.lease);
        assert_ne!(ka.release_channel, kb.release_channel);
    }
}
