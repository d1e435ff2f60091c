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
            .map(|(purpose, resource)| {
                let attempt = &attempt;
                async move {
                    let outcome = self.inspect(&purpose, &resource, attempt).await;
                    (purpose, resource, outcome)
                }
            })
            .buffer_unordered(READS_AT_ONCE);
        let mut leases = Vec::new();
        while let Some((purpose, resource, outcome)) = reads.next().await {
            match outcome.into_held() {
                Ok(Some((remaining, token, holder))) => leases.push(ListedLease {
                    purpose,
                    resource,
                    token,
                    holder,
                    remaining,
                }),
                // Expired or released since the scan.
                Ok(None) => {}
                Err(detail) => {
                    return Ok(ListOutcome::Unavailable { detail });
                }
            }
        }
        leases.sort_by(|a, b| (&a.purpose, a.resource).cmp(&(&b.purpose, b.resource)));
        Ok(ListOutcome::Listed { leases, truncated })
    }
}

/// `<purpose>:{<group>}:<64 hex>` → the purpose and digest; `None` for anything else (a
/// fence counter, a key another program wrote).
fn lease_of(rest: &str) -> Option<(Purpose, ResourceDigest)> {
    let (purpose, tail) = rest.split_once(":{")?;
    let (_, hex) = tail.split_once("}:")?;
    let resource = ResourceDigest::parse(&format!("sha256:{hex}")).ok()?;
    Some((Purpose::new(purpose).ok()?, resource))
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
        assert_eq!(lease_of(rest), Some((purpose, digest)));
        let fence = keys.fence.strip_prefix("leasehold:lease:v2:").unwrap();
        assert_eq!(lease_of(fence), None);
        assert_eq!(lease_of("reports:{abcd}:not-hex"), None);
        assert_eq!(lease_of("Bad:{abcd}:00"), None);
    }
}
