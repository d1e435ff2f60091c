//! `LeaseClient::list`: the leases held in this client's namespace — what an operator asks
//! first during an incident.
//!
//! A bounded `SCAN` finds the lease keys; each is then read like `inspect` (token,
//! remaining time, holder label), so an owner token never leaves Redis. The keys name the
//! purpose and the resource's digest; the raw resource id was never stored.

use std::time::Duration;

use futures_util::StreamExt as _;

use crate::backend::FailureDetail;
use crate::error::LeaseError;
use crate::lease::LeaseClient;
use crate::protocol::limits::MAX_PERMITS;
use crate::protocol::{FencingToken, HolderLabel, Purpose, ResourceDigest};

/// Leases read at once while listing: the batcher sends them together.
const READS_AT_ONCE: usize = 64;

/// One held lease, as [`LeaseClient::list`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLease {
    /// What the lease is for.
    pub purpose: Purpose,
    /// Which resource (its digest: the raw id is never stored).
    pub resource: ResourceDigest,
    /// The holder's fencing token.
    pub token: FencingToken,
    /// The holder's label, if its acquisition gave one.
    pub holder: Option<HolderLabel>,
    /// The server's remaining time to live when read.
    pub remaining: Duration,
    /// For a slot of a counted lease ([`LeaseRequestBuilder::permits`]): which slot, and
    /// of how many permits. `None` for a plain lease.
    ///
    /// [`LeaseRequestBuilder::permits`]: crate::protocol::LeaseRequestBuilder::permits
    pub slot: Option<ListedSlot>,
}

/// Which slot of a counted lease a [`ListedLease`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListedSlot {
    /// The slot, `0 .. permits`.
    pub slot: u16,
    /// The counted lease's permits.
    pub permits: u16,
}

/// What [`LeaseClient::list`] found.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListOutcome {
    /// *When*: the scan and every read answered. *What to do*: read `leases` (by purpose,
    /// then digest); with `truncated`, more leases matched than the limit allowed.
    Listed {
        /// The held leases found, sorted by purpose then digest.
        leases: Vec<ListedLease>,
        /// The limit cut the listing short.
        truncated: bool,
    },
    /// *When*: the scan or a read did not answer (no connection, a timeout, a refusal).
    /// *What to do*: try again; nothing was written, and nothing is known.
    Unavailable {
        /// What failed.
        detail: FailureDetail,
    },
}

impl LeaseClient {
    /// The leases held in this client's namespace — for one purpose, or all — at most
    /// `limit` of them. Read only: a bounded `SCAN` (on every primary of a Cluster), then
    /// one read per lease, as [`inspect`](Self::inspect) does. The scan is bounded by the
    /// command timeout; a lease that expires meanwhile is left out.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::*;
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let ListOutcome::Listed { leases, .. } = client.list(None, 1_000).await? else {
    ///     panic!("in memory, a listing always answers")
    /// };
    /// assert!(leases.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::EntropyUnavailable`] (the reading attempt), before any I/O.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn list(
        &self,
        purpose: Option<&Purpose>,
        limit: usize,
    ) -> Result<ListOutcome, LeaseError> {
        // A stranger's attempt: every holder reads as another.
        let attempt = self.new_attempt("list")?;
        let namespace = &self.settings().namespace;
        let prefix = match purpose {
            Some(purpose) => format!("{namespace}:lease:v2:{purpose}:"),
            None => format!("{namespace}:lease:v2:"),
        };
        let scanned = self
            .backend()
            .scan_leases(&prefix, limit, self.settings().command_timeout)
            .await;
        let (keys, truncated) = match scanned {
            Ok(found) => found,
            Err(failure) => {
                return Ok(ListOutcome::Unavailable {
                    detail: failure.detail().clone(),
                });
            }
        };
        let namespace_prefix = format!("{namespace}:lease:v2:");
        let names = keys
            .iter()
            .filter_map(|key| lease_of(key.strip_prefix(&namespace_prefix)?));
        let mut reads = futures_util::stream::iter(names)
            .map(|(purpose, resource, slot)| {
                let attempt = &attempt;
                async move {
                    let mut keys = self.keys(&purpose, &resource);
                    if let Some(ListedSlot { slot, permits }) = slot {
                        keys = keys.counted(permits).for_slot(slot);
                    }
                    let outcome = self.inspect_keys(&keys, &purpose, &resource, attempt).await;
                    (purpose, resource, slot, outcome)
                }
            })
            .buffer_unordered(READS_AT_ONCE);
        let mut leases = Vec::new();
        while let Some((purpose, resource, slot, outcome)) = reads.next().await {
            match outcome.into_held() {
                Ok(Some((remaining, token, holder))) => leases.push(ListedLease {
                    purpose,
                    resource,
                    token,
                    holder,
                    remaining,
                    slot,
                }),
                // Expired or released since the scan.
                Ok(None) => {}
                Err(detail) => {
                    return Ok(ListOutcome::Unavailable { detail });
                }
            }
        }
        leases.sort_by(|a, b| {
            (&a.purpose, a.resource, a.slot).cmp(&(&b.purpose, b.resource, b.slot))
        });
        Ok(ListOutcome::Listed { leases, truncated })
    }
}

/// `<purpose>:{<group>}:<64 hex>` → the purpose and digest, and for a counted lease's
/// slot key (`…:<64 hex>:n<permits>#<slot>`, [`LeaseKeys`]) which slot; `None` for anything
/// else (a fence counter, a key another program wrote).
///
/// [`LeaseKeys`]: crate::protocol::LeaseKeys
fn lease_of(rest: &str) -> Option<(Purpose, ResourceDigest, Option<ListedSlot>)> {
    let (purpose, tail) = rest.split_once(":{")?;
    let (_, name) = tail.split_once("}:")?;
    let (hex, slot) = match name.split_once(":n") {
        None => (name, None),
        Some((hex, counted)) => {
            let (permits, slot) = counted.split_once('#')?;
            let (permits, slot) = (permits.parse().ok()?, slot.parse().ok()?);
            // The names leasehold makes, nothing else: `n1` and leading zeros never are.
            let canonical = format!("{permits}#{slot}") == counted;
            if !(canonical && (2..=MAX_PERMITS).contains(&permits) && slot < permits) {
                return None;
            }
            (hex, Some(ListedSlot { slot, permits }))
        }
    };
    let resource = ResourceDigest::parse(&format!("sha256:{hex}")).ok()?;
    Some((Purpose::new(purpose).ok()?, resource, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_key_names_its_purpose_and_digest_and_nothing_else_is_taken_for_one() {
        let digest = ResourceDigest::of(b"tenant-7");
        let purpose = Purpose::new("reports").unwrap();
        let keys = crate::protocol::LeaseKeys::new(&Default::default(), &purpose, &digest);
        let rest = keys.lease.strip_prefix("leasehold:lease:v2:").unwrap();
        assert_eq!(lease_of(rest), Some((purpose.clone(), digest, None)));
        let fence = keys.fence.strip_prefix("leasehold:lease:v2:").unwrap();
        assert_eq!(lease_of(fence), None);
        let slot = keys.clone().counted(4).for_slot(3);
        let rest = slot.lease.strip_prefix("leasehold:lease:v2:").unwrap();
        let listed = ListedSlot {
            slot: 3,
            permits: 4,
        };
        assert_eq!(lease_of(rest), Some((purpose, digest, Some(listed))));
        for odd in [":n4#4", ":n4", ":n1#0", ":n04#1", ":n65#0", ":n4#x", "#1"] {
            let key = format!("{}{odd}", keys.lease);
            let rest = key.strip_prefix("leasehold:lease:v2:").unwrap();
            assert_eq!(lease_of(rest), None, "{odd}");
        }
        assert_eq!(lease_of("reports:{abcd}:not-hex"), None);
        assert_eq!(lease_of("Bad:{abcd}:00"), None);
    }
}
