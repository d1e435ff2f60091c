//! Key layout (v2): `{namespace}:lease:v2:{purpose}:{<group>}:<hex digest>` plus companions.
//!
//! `<group>` is the first four hex digits of the digest (one of 65,536 groups). The braces
//! around it are a Redis Cluster hash tag: a lease key, its group's fence counter and its
//! release channel hash to one hash slot, so one script can touch them atomically.
//!
//! # Why a fence counter per group, not per resource
//!
//! The counter never expires (tokens must keep increasing after a lease expired). One
//! counter per resource would leave a key behind for every resource ever leased — without
//! bound for workloads that lease per job or per request. One counter per group bounds them
//! at 65,536 per (namespace, purpose) and keeps every guarantee: a token larger than every
//! token issued before in the group is larger than every token issued before for each of
//! its resources.
//!
//! # Counted leases
//!
//! A lease of N > 1 permits is named `<lease>:n<N>` (N is part of the name: holders that
//! disagree on it do not count against each other) and lives in N slot keys
//! `<lease>:n<N>#0 … #<N-1>`, each an ordinary lease key. Its slots share the group's fence
//! counter, so tokens increase across all of them, and one release channel,
//! `<lease>:n<N>:released`: a waiter listens once for every slot. No other key of the
//! layout holds a `#` (names never do), which is how `lua/release.lua` finds a slot's
//! channel.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::protocol::{Namespace, Purpose, ResourceDigest};

/// Hex digits of the digest that name a lease's group (its hash tag).
const GROUP_HEX_DIGITS: usize = 4;

/// The Redis names one lease uses, read through [`lease`](Self::lease),
/// [`fence`](Self::fence) and [`release_channel`](Self::release_channel).
///
/// For a counted lease these are the names of the whole lease until an acquisition took a
/// slot ([`for_slot`](Self::for_slot)), and then those of the slot: `lease` is the slot's
/// key, the fence and the release channel are shared by all slots.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseKeys {
    /// The three names in one string — a held lease keeps them for its whole life, and one
    /// allocation costs less than three (docs/performance.md, "R with one actor per
    /// lease"): the release channel, the fence, then for a counted lease's slot the slot's
    /// key, `<name>:released<group>:fence[<name>#<slot>]`.
    ///
    /// * The lease key: a string with a PX expiry — owner token, operation id, holder
    ///   label if any, fencing token and lock-delay if any, laid out as docs/design.md §3
    ///   says (`lua/owner.lua` reads it). For a counted lease before a slot is taken, the
    ///   name its slot keys extend (no key of that name is written).
    /// * The fencing counter of the lease's group: the last token issued to any lease of
    ///   the group. Never expires.
    /// * The pub/sub channel on which a release is announced, so waiters wake early: the
    ///   lease's name followed by `:released` (`lua/release.lua` derives it by the same
    ///   rule).
    text: Arc<str>,
    /// Where the lease key is in `text`: the name the channel starts with, or after the
    /// fence for a slot. Offsets are `u32` (a text is a few hundred bytes: the names'
    /// limits), so that a held lease's keys take 64 bytes rather than 80.
    lease: (u32, u32),
    /// Where the release channel (which starts `text`) ends and the fence begins.
    channel_end: u32,
    /// Where the fence ends.
    fence_end: u32,
    /// Holders admitted at once: 1 for a plain lease.
    permits: u16,
    /// The slot these keys name, once a counted lease's acquisition took one.
    slot: Option<u16>,
}

/// A position in a keys' text. The names' limits keep a text to a few hundred bytes, so
/// the saturation never happens.
fn offset(at: usize) -> u32 {
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// What follows a lease's name in its release channel.
const RELEASED: &str = ":released";

impl fmt::Debug for LeaseKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseKeys")
            .field("lease", &self.lease())
            .field("fence", &self.fence())
            .field("release_channel", &self.release_channel())
            .field("permits", &self.permits)
            .field("slot", &self.slot)
            .finish()
    }
}

impl LeaseKeys {
    /// The keys for one (namespace, purpose, resource).
    pub fn new(namespace: &Namespace, purpose: &Purpose, resource: &ResourceDigest) -> Self {
        // Built by concatenation rather than `format!`: every acquisition makes these names,
        // and the formatting machinery was most of their cost (docs/performance.md, "W2's
        // client CPU").
        let hex = resource.hex();
        let group = [
            namespace.as_str(),
            ":lease:v2:",
            purpose.as_str(),
            ":{",
            &hex[..GROUP_HEX_DIGITS],
            "}",
        ];
        let name = [&group[..], &[":", &hex]].concat();
        let name_len = name.iter().map(|part| part.len()).sum();
        let text = [&name[..], &[RELEASED], &group[..], &[":fence"]].concat();
        Self::from_name(&text.concat(), name_len, 1)
    }

    /// The keys whose text is `<name>:released<fence>`, the name `name_len` bytes long.
    fn from_name(text: &str, name_len: usize, permits: u16) -> Self {
        Self {
            text: text.into(),
            lease: (0, offset(name_len)),
            channel_end: offset(name_len + RELEASED.len()),
            fence_end: offset(text.len()),
            permits,
            slot: None,
        }
    }

    /// The keys of the counted lease of `permits` holders on the same resource; `self`
    /// unchanged for 1. `permits` is a request's, checked by its builder (1 ..=
    /// [`MAX_PERMITS`](crate::protocol::limits::MAX_PERMITS)).
    pub fn counted(self, permits: u16) -> Self {
        if permits <= 1 || self.permits != 1 {
            return self;
        }
        let name = format!("{}:n{permits}", self.lease());
        let text = [name.as_str(), RELEASED, self.fence()].concat();
        Self::from_name(&text, name.len(), permits)
    }

    /// The lease's key, holding its value with a PX expiry; for a counted lease before a
    /// slot is taken, the name its slot keys extend (no key of that name is written).
    pub fn lease(&self) -> &str {
        &self.text[self.lease_range()]
    }

    fn lease_range(&self) -> Range<usize> {
        self.lease.0 as usize..self.lease.1 as usize
    }

    /// The string [`lease`](Self::lease) is a part of, and where: an operation that sends
    /// the lease key shares it rather than copying it.
    pub(crate) fn lease_part(&self) -> (&Arc<str>, Range<usize>) {
        (&self.text, self.lease_range())
    }

    /// Where [`fence`](Self::fence) is in [`lease_part`](Self::lease_part)'s string.
    pub(crate) fn fence_range(&self) -> Range<usize> {
        self.channel_end as usize..self.fence_end as usize
    }

    /// Where [`release_channel`](Self::release_channel) is in
    /// [`lease_part`](Self::lease_part)'s string.
    pub(crate) fn release_channel_range(&self) -> Range<usize> {
        0..self.channel_end as usize
    }

    /// The fencing counter of the lease's group: the last token issued to any lease of the
    /// group. Never expires.
    pub fn fence(&self) -> &str {
        &self.text[self.fence_range()]
    }

    /// The pub/sub channel on which a release is announced, so waiters wake early: the
    /// lease's name followed by `:released`.
    pub fn release_channel(&self) -> &str {
        &self.text[self.release_channel_range()]
    }

    /// Holders the lease admits at once: 1 for a plain lease.
    pub fn permits(&self) -> u16 {
        self.permits
    }

    /// The slot these keys name, if they are a counted lease's slot.
    pub fn slot(&self) -> Option<u16> {
        self.slot
    }

    /// The keys of slot `slot` (`0 .. permits`) of a counted lease; a clone for a plain
    /// lease (its only slot is the lease) and for keys already naming a slot.
    pub fn for_slot(&self, slot: u16) -> Self {
        self.clone().into_slot(slot)
    }

    /// [`for_slot`](Self::for_slot), without the copy.
    pub(crate) fn into_slot(self, slot: u16) -> Self {
        if self.permits == 1 || self.slot.is_some() {
            return self;
        }
        let key = self.slot_key(slot);
        let text = [&self.text[..self.fence_end as usize], key.as_str()].concat();
        Self {
            lease: (self.fence_end, offset(text.len())),
            text: text.into(),
            slot: Some(slot),
            ..self
        }
    }

    /// The keys of each slot, in slot order: those of every slot of a counted lease, `self`
    /// alone for a plain lease and for keys already naming a slot. What a read or a release
    /// by attempt goes through when the attempt's slot is not known.
    pub(crate) fn each_slot(&self) -> Vec<Self> {
        match (self.permits, self.slot) {
            (1, _) | (_, Some(_)) => vec![self.clone()],
            (n, None) => (0..n).map(|slot| self.for_slot(slot)).collect(),
        }
    }

    /// Every key an acquisition reads: the lease key for a plain lease, each slot's key for
    /// a counted one.
    pub(crate) fn slot_keys(&self) -> Vec<String> {
        match (self.permits, self.slot) {
            (1, _) | (_, Some(_)) => vec![self.lease().to_owned()],
            (n, None) => (0..n).map(|slot| self.slot_key(slot)).collect(),
        }
    }

    /// Slot `slot`'s key: the counted lease's name, `#`, the slot.
    fn slot_key(&self, slot: u16) -> String {
        format!("{}#{slot}", self.lease())
    }

    /// The lease's line of waiters (`lua/line.lua`): the lease's name (a counted lease's,
    /// shared by its slots) followed by `:line`. No lease key ends so: a listing skips it.
    pub(crate) fn line(&self) -> String {
        [self.name(), ":line"].concat()
    }

    /// The keep-alive key of a line session's waiters in the line (`lua/line.lua`).
    pub(crate) fn keep_alive(&self, session: &str) -> String {
        [self.name(), ":line:", session].concat()
    }

    /// The channel on which a line session's waiters are told their turn, each by its
    /// waiter id as the message: the keep-alive key's name.
    pub(crate) fn turn_channel(&self, session: &str) -> String {
        self.keep_alive(session)
    }

    /// The lease's name: its key, or for a counted lease the name its slots extend.
    fn name(&self) -> &str {
        &self.text[..self.channel_end as usize - RELEASED.len()]
    }

    /// Pub/sub channel on which an acquisition is announced, for observers: the lease's
    /// name (a counted lease's, for each of its slots) followed by `:acquired`
    /// (`lua/acquire.lua` derives it by the same rule). Made on demand: only an observer
    /// subscribes to it.
    pub(crate) fn acquire_channel(&self) -> String {
        [self.name(), ":acquired"].concat()
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
        assert_eq!(keys.lease(), format!("leasehold:lease:v2:jobs:{tag}:{hex}"));
        assert_eq!(keys.fence(), format!("leasehold:lease:v2:jobs:{tag}:fence"));
        assert_eq!(keys.release_channel(), format!("{}:released", keys.lease()));
        for k in [keys.lease(), keys.fence(), keys.release_channel()] {
            // Exactly one `{…}`, holding the group: that is what Redis Cluster hashes.
            assert_eq!(k.matches('{').count(), 1);
            assert!(k.contains(&tag));
        }
    }

    #[test]
    fn a_counted_lease_names_its_slots_under_the_same_tag_and_shares_fence_and_channels() {
        let d = ResourceDigest::of(b"r");
        let plain = LeaseKeys::new(&Namespace::default(), &Purpose::new("jobs").unwrap(), &d);
        assert_eq!(plain.clone().counted(1), plain);
        assert_eq!(plain.for_slot(0), plain);
        assert_eq!(plain.slot_keys(), vec![plain.lease().to_owned()]);
        let counted = plain.clone().counted(3);
        assert_eq!(counted.permits(), 3);
        assert_eq!(counted.lease(), format!("{}:n3", plain.lease()));
        assert_eq!(counted.fence(), plain.fence());
        assert_eq!(
            counted.release_channel(),
            format!("{}:n3:released", plain.lease())
        );
        assert_eq!(
            counted.acquire_channel(),
            format!("{}:n3:acquired", plain.lease())
        );
        let slots = counted.slot_keys();
        assert_eq!(slots.len(), 3);
        assert_eq!(slots[2], format!("{}:n3#2", plain.lease()));
        let slot = counted.for_slot(2);
        assert_eq!((slot.lease(), slot.slot()), (slots[2].as_str(), Some(2)));
        assert_eq!(slot.release_channel(), counted.release_channel());
        assert_eq!(slot.acquire_channel(), counted.acquire_channel());
        assert_eq!(slot.slot_keys(), [slots[2].clone()]);
        let each: Vec<_> = counted
            .each_slot()
            .into_iter()
            .map(|k| k.lease().to_owned())
            .collect();
        assert_eq!(each, slots);
        assert_eq!(slot.each_slot(), std::slice::from_ref(&slot));
        assert_eq!(plain.each_slot(), std::slice::from_ref(&plain));
        // Another count is another lease.
        assert_ne!(plain.counted(4).lease(), counted.lease());
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
        assert_eq!(ka.fence(), kb.fence());
        assert_ne!(ka.fence(), kc.fence());
        assert_ne!(ka.lease(), kb.lease());
        assert_ne!(ka.release_channel(), kb.release_channel());
    }
}
