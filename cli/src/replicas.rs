//! `--replicas`: what the command asked of replicas and how an acquisition fell short.

use std::time::Duration;

use leasehold::runtime::LeaseContext;
use leasehold::{FailureDetail, Replication};

/// `--replica-wait` when `--replicas` is given without it: long enough for a replica on a
/// loaded network to answer (a healthy one acknowledges within milliseconds, since `WAIT`
/// asks the replicas at once), short enough to fit the default 30 s TTL many times over.
pub(crate) const DEFAULT_REPLICA_WAIT: Duration = Duration::from_secs(1);

/// What the command asked of replicas (`--replicas`, `--replica-wait`, `--require-replicas`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplicaPolicy {
    pub(crate) wanted: u32,
    pub(crate) wait: Duration,
    /// Refuse to run the command on a shortfall.
    pub(crate) required: bool,
}

/// Why an acquisition is not known to be on the replicas asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Shortfall {
    /// `WAIT` answered with fewer than asked for.
    #[error("{acked} of {wanted} replicas acknowledged the lease within {}", humantime::format_duration(*.wait))]
    Acknowledged {
        acked: u32,
        wanted: u32,
        wait: Duration,
    },
    /// A replay confirmed the lease; it writes nothing, so nothing was waited for.
    #[error("the lease was confirmed by a replay, which waits for no replica")]
    NotWaited,
    /// `WAIT` did not answer.
    #[error("the wait for replicas did not answer ({0})")]
    Unknown(FailureDetail),
    /// A report this version of the CLI does not know: not counted as acknowledged.
    #[error("replication {0}")]
    Other(&'static str),
}

impl ReplicaPolicy {
    /// The shortfall of `replication` against this policy, if any.
    fn shortfall(&self, replication: &Replication) -> Option<Shortfall> {
        match replication {
            Replication::Acknowledged { acked, wanted } if acked < wanted => {
                Some(Shortfall::Acknowledged {
                    acked: *acked,
                    wanted: *wanted,
                    wait: self.wait,
                })
            }
            Replication::Acknowledged { .. } => None,
            Replication::NotWaited => Some(Shortfall::NotWaited),
            Replication::Unknown { detail } => Some(Shortfall::Unknown(detail.clone())),
            other => Some(Shortfall::Other(other.as_str())),
        }
    }
}

/// Reports the acquisition: one `lease acquired` event (INFO) with the replica counts for
/// the JSON logs, and — if replicas were asked for and fell short — one line on stderr.
/// Returns the shortfall if the command must not run.
pub(crate) fn report_acquired(
    ctx: &LeaseContext,
    replicas: Option<ReplicaPolicy>,
) -> Option<Shortfall> {
    let replication = ctx.replication();
    let acked = match replication {
        Replication::Acknowledged { acked, .. } => Some(*acked),
        _ => None,
    };
    // Inside the lease actor's span, which carries purpose, digest and operation id.
    tracing::info!(
        token = ctx.token().get(),
        replication = replication.as_str(),
        replicas_acked = acked,
        replicas_wanted = replicas.map(|p| p.wanted),
        "lease acquired"
    );
    let policy = replicas?;
    let shortfall = policy.shortfall(replication)?;
    if policy.required {
        return Some(shortfall);
    }
    say!(
        "{shortfall}; running the command anyway (a failover now can lose the \
         lease; --require-replicas refuses)"
    );
    None
}
