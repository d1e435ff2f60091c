//! `LeaseClient::list`: the leases held in this client's namespace — what an operator asks
//! first during an incident.
//!
//! A `SCAN` finds the lease keys a page at a time; each is read like `inspect` (token,
//! remaining time, holder label) as soon as it is found, so an owner token never leaves
//! Redis. The keys name the purpose and the resource's digest; the raw resource id was
//! never stored. Each `SCAN` step and each read has the command timeout; the listing as a
//! whole has a budget, and running out of it ends the listing with what was read.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use crate::backend::{FailureDetail, KeyPages};
use crate::error::LeaseError;
use crate::lease::{InspectOutcome, LeaseClient};
use crate::protocol::limits::{
    DEFAULT_LIST_BUDGET, LIST_ATTEMPTS, LIST_BUDGET, MAX_PERMITS, deadline_after,
};
use crate::protocol::{Attempt, FencingToken, HolderLabel, Purpose, ResourceDigest};

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

/// How much of the namespace a [`ListOutcome::Listed`] covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListCoverage {
    /// The scan crossed the whole keyspace and every lease it found was read: every lease
    /// held throughout the listing is in it.
    Complete,
    /// More leases matched than the limit: the first `limit` the scan found were read.
    /// Raise the limit to see the others.
    StoppedAtLimit,
    /// The budget ran out before the scan crossed the keyspace or before every lease
    /// found was read: what was read by then. Others may be held; a larger budget (or a
    /// purpose, which matches fewer keys) sees more.
    OutOfBudget,
}

impl ListCoverage {
    /// Whether every lease held throughout the listing is in it.
    pub fn is_complete(self) -> bool {
        self == Self::Complete
    }
}

/// What [`LeaseClient::list`] found.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListOutcome {
    /// *When*: every `SCAN` step and every read that was made answered. *What to do*: read
    /// `leases` (by purpose, then digest, then slot), and `coverage` for whether that is
    /// all of them.
    Listed {
        /// The held leases read, sorted by purpose, digest, then slot.
        leases: Vec<ListedLease>,
        /// Whether that is every lease, or where the listing stopped.
        coverage: ListCoverage,
    },
    /// *When*: a `SCAN` step or a read did not answer (no connection, a timeout, a
    /// refusal). *What to do*: try again; nothing was written, and nothing is known.
    Unavailable {
        /// What failed.
        detail: FailureDetail,
    },
}

/// A lease a key names: its purpose, digest, and slot if counted.
type Name = (Purpose, ResourceDigest, Option<ListedSlot>);

impl LeaseClient {
    /// The leases held in this client's namespace — for one purpose, or all — at most
    /// `limit` of them, within the default budget of 10 s
    /// ([`DEFAULT_LIST_BUDGET`](crate::protocol::limits::DEFAULT_LIST_BUDGET)); see
    /// [`list_within`](Self::list_within).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::*;
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let ListOutcome::Listed { leases, coverage } = client.list(None, 1_000).await? else {
    ///     panic!("in memory, a listing always answers")
    /// };
    /// assert!(leases.is_empty() && coverage.is_complete());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`list_within`](Self::list_within).
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn list(
        &self,
        purpose: Option<&Purpose>,
        limit: usize,
    ) -> Result<ListOutcome, LeaseError> {
        self.list_within(purpose, limit, DEFAULT_LIST_BUDGET).await
    }

    /// As [`list`](Self::list), taking at most `budget` (1 ms ..= 1 h) in all. Read only:
    /// `SCAN` steps (on every primary of a Cluster), each with the command timeout, and one
    /// read per lease found, as [`inspect`](Self::inspect) does, 64 at a time while the
    /// scan goes on; a step or a read that does not answer is asked again — three attempts
    /// in all — before the listing is `Unavailable`. A lease that expires meanwhile is left out. When the budget runs
    /// out first, the leases read by then are returned, as [`ListCoverage::OutOfBudget`] —
    /// never `Unavailable`, which means Redis did not answer. The future is `Send`: a task
    /// of its own can list.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for a `budget` out of bounds;
    /// [`LeaseError::EntropyUnavailable`] (the reading attempt) — both before any I/O.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn list_within(
        &self,
        purpose: Option<&Purpose>,
        limit: usize,
        budget: Duration,
    ) -> Result<ListOutcome, LeaseError> {
        let budget = LIST_BUDGET.check(budget)?;
        let deadline = deadline_after(Instant::now(), budget);
        // A stranger's attempt: every holder reads as another.
        let attempt = self.new_attempt("list")?;
        let namespace = &self.settings().namespace;
        let prefix = match purpose {
            Some(purpose) => format!("{namespace}:lease:v2:{purpose}:"),
            None => format!("{namespace}:lease:v2:"),
        };
        let pages = self
            .backend()
            .scan_leases(&prefix, self.settings().command_timeout);
        let mut found = Found::new(format!("{namespace}:lease:v2:"), limit);
        Ok(match found.read(self, &attempt, pages, deadline).await {
            Ok(coverage) => {
                let mut leases = found.leases;
                leases.sort_by(|a, b| {
                    (&a.purpose, a.resource, a.slot).cmp(&(&b.purpose, b.resource, b.slot))
                });
                ListOutcome::Listed { leases, coverage }
            }
            Err(detail) => ListOutcome::Unavailable { detail },
        })
    }
}

/// What a listing found: the keys the scan gave (each once), those not yet read, and the
/// leases read.
struct Found {
    namespace_prefix: String,
    limit: usize,
    seen: HashSet<String>,
    unread: VecDeque<Name>,
    at_limit: bool,
    leases: Vec<ListedLease>,
}

impl Found {
    fn new(namespace_prefix: String, limit: usize) -> Self {
        Self {
            namespace_prefix,
            limit,
            seen: HashSet::new(),
            unread: VecDeque::new(),
            at_limit: false,
            leases: Vec::new(),
        }
    }

    /// Scans `pages` and reads what they name until the scan is over and every lease read,
    /// or `deadline`; the first failure ends it.
    async fn read(
        &mut self,
        client: &LeaseClient,
        attempt: &Attempt,
        pages: KeyPages<'_>,
        deadline: Instant,
    ) -> Result<ListCoverage, FailureDetail> {
        let mut pages = pages.fuse();
        let mut reads = FuturesUnordered::new();
        let budget = tokio::time::sleep_until(deadline);
        tokio::pin!(budget);
        loop {
            while reads.len() < READS_AT_ONCE
                && let Some(name) = self.unread.pop_front()
            {
                reads.push(read(client, attempt, name));
            }
            let scanning = !self.at_limit && !pages.is_done();
            if !scanning && reads.is_empty() {
                return Ok(if self.at_limit {
                    ListCoverage::StoppedAtLimit
                } else {
                    ListCoverage::Complete
                });
            }
            tokio::select! {
                // Out of budget is what it is, whatever else is ready at that moment.
                biased;
                () = &mut budget => return Ok(ListCoverage::OutOfBudget),
                Some((name, outcome)) = reads.next(), if !reads.is_empty() => {
                    self.read_one(name, outcome)?;
                }
                page = pages.next(), if scanning => match page {
                    Some(Ok(keys)) => self.found(keys),
                    Some(Err(failure)) => return Err(failure.detail().clone()),
                    None => {}
                },
            }
        }
    }

    /// Takes the lease keys of one page, each once, up to the limit.
    fn found(&mut self, keys: Vec<String>) {
        for key in keys {
            if self.seen.contains(&key) {
                continue;
            }
            let Some(name) = key.strip_prefix(&self.namespace_prefix).and_then(lease_of) else {
                continue;
            };
            if self.seen.len() == self.limit {
                self.at_limit = true;
                return;
            }
            self.seen.insert(key);
            self.unread.push_back(name);
        }
    }

    fn read_one(&mut self, name: Name, outcome: InspectOutcome) -> Result<(), FailureDetail> {
        let (purpose, resource, slot) = name;
        // `None`: expired or released since the scan.
        if let Some((remaining, token, holder)) = outcome.into_held()? {
            self.leases.push(ListedLease {
                purpose,
                resource,
                token,
                holder,
                remaining,
                slot,
            });
        }
        Ok(())
    }
}

/// Reads the lease `name` names, as `inspect` does, up to [`LIST_ATTEMPTS`] times while
/// the read does not answer.
async fn read(client: &LeaseClient, attempt: &Attempt, name: Name) -> (Name, InspectOutcome) {
    let (purpose, resource, slot) = &name;
    let mut keys = client.keys(purpose, resource);
    if let Some(ListedSlot { slot, permits }) = *slot {
        keys = keys.counted(permits).for_slot(slot);
    }
    // A listing names holders only: the line's length is `inspect`'s.
    let mut outcome = client
        .inspect_keys(&keys, purpose, resource, attempt)
        .await
        .0;
    for _ in 1..LIST_ATTEMPTS {
        if !matches!(
            outcome,
            InspectOutcome::Unavailable { .. } | InspectOutcome::Indeterminate { .. }
        ) {
            break;
        }
        outcome = client
            .inspect_keys(&keys, purpose, resource, attempt)
            .await
            .0;
    }
    (name, outcome)
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
        let rest = keys.lease().strip_prefix("leasehold:lease:v2:").unwrap();
        assert_eq!(lease_of(rest), Some((purpose.clone(), digest, None)));
        let fence = keys.fence().strip_prefix("leasehold:lease:v2:").unwrap();
        assert_eq!(lease_of(fence), None);
        let slot = keys.clone().counted(4).for_slot(3);
        let rest = slot.lease().strip_prefix("leasehold:lease:v2:").unwrap();
        let listed = ListedSlot {
            slot: 3,
            permits: 4,
        };
        assert_eq!(lease_of(rest), Some((purpose, digest, Some(listed))));
        for odd in [":n4#4", ":n4", ":n1#0", ":n04#1", ":n65#0", ":n4#x", "#1"] {
            let key = format!("{}{odd}", keys.lease());
            let rest = key.strip_prefix("leasehold:lease:v2:").unwrap();
            assert_eq!(lease_of(rest), None, "{odd}");
        }
        assert_eq!(lease_of("reports:{abcd}:not-hex"), None);
        assert_eq!(lease_of("Bad:{abcd}:00"), None);
    }
}
