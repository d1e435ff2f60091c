//! `Session`: what every lease operation needs — the backend and the settings — shared by
//! a [`LeaseClient`](crate::LeaseClient), its clones and every handle it gave out. The
//! operations' modules depend on it along one chain:
//!
//! ```text
//! client ─▶ wait ─▶ acquire ─▶ handle ─▶ release ─▶ session
//!                                  ├──▶ renewal ─────────▶ session
//!                                  └──▶ state
//! ```
//!
//! `outcome` stands beside the chain, not in it: it and `handle` name each other
//! (`AcquireOutcome::Acquired` carries a [`LeaseHandle`](crate::LeaseHandle), whose
//! operations answer with outcomes).

use std::fmt;
use std::sync::Arc;

use crate::backend::LeaseBackend;
use crate::lease::line_places::LinePlaces;
use crate::lease::settings::LeaseSettings;
use crate::protocol::{LeaseKeys, LeaseRequest, Purpose, ResourceDigest, WaiterId};

/// The backend and the settings of one client, and its line session.
pub(crate) struct Session {
    backend: Arc<dyn LeaseBackend>,
    settings: LeaseSettings,
    line_places: LinePlaces,
}

impl Session {
    pub(crate) fn new(backend: Arc<dyn LeaseBackend>, settings: LeaseSettings) -> Self {
        Self {
            backend,
            settings,
            line_places: LinePlaces::new(),
        }
    }

    /// The client's line session: its waiters' ids and places in lines.
    pub(crate) fn line_places(&self) -> &LinePlaces {
        &self.line_places
    }

    /// `request`'s waiter id in its lease's line.
    pub(crate) fn waiter_id(&self, request: &LeaseRequest) -> WaiterId {
        self.line_places.waiter_id(request.attempt())
    }

    pub(crate) fn backend(&self) -> &dyn LeaseBackend {
        self.backend.as_ref()
    }

    pub(crate) fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// The Redis keys of a lease under this session's namespace.
    pub(crate) fn keys(&self, purpose: &Purpose, resource: &ResourceDigest) -> LeaseKeys {
        LeaseKeys::new(&self.settings.namespace, purpose, resource)
    }

    /// The keys `request` acquires: its lease's, counted when it has more than one permit.
    pub(crate) fn request_keys(&self, request: &LeaseRequest) -> LeaseKeys {
        self.keys(request.purpose(), request.resource())
            .counted(request.permits())
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("backend", &self.backend)
            .field("settings", &self.settings)
            .finish()
    }
}
