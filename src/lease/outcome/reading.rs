//! [`LeaseReading`]: one read of a lease — each slot's state and how many wait in its line.

use crate::lease::outcome::InspectOutcome;

/// What one read of a lease saw: each slot as [`inspect_slots`] reads it, and how many
/// entries its line of waiters holds (docs/design.md §4, "The line").
///
/// [`inspect_slots`]: crate::LeaseClient::inspect_slots
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseReading {
    /// Each slot's outcome, in slot order: one for a plain lease.
    pub slots: Vec<InspectOutcome>,
    /// The entries in the lease's line (a counted lease has one line for all its slots):
    /// acquisitions waiting for it. A waiter that died is counted until it is dropped from
    /// the line (2 s after its last sign of life, once it reaches the head). `None` when
    /// the line could not be read: the read failed, or an ACL refuses `ZCARD`.
    pub waiting: Option<u64>,
}

impl LeaseReading {
    /// A reading of `slots`, each read with the length of the line it saw (`None`: not
    /// read): the longest one read, as the slots are read together.
    pub(crate) fn of(slots: Vec<(InspectOutcome, Option<u64>)>) -> Self {
        let waiting = slots.iter().filter_map(|(_, waiting)| *waiting).max();
        Self {
            slots: slots.into_iter().map(|(slot, _)| slot).collect(),
            waiting,
        }
    }

    /// The whole lease's outcome, as [`LeaseClient::inspect`](crate::LeaseClient::inspect)
    /// answers it.
    pub fn outcome(&self) -> InspectOutcome {
        InspectOutcome::of_slots(self.slots.clone())
    }
}
