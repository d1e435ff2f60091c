//! The one source of randomness in leasehold's timing: the jitter of waits and of a
//! supervisor's pauses.

use std::time::Duration;

use rand::RngExt as _;

/// A random duration in `0 ..= max`.
pub(crate) fn up_to(max: Duration) -> Duration {
    // The simulation replays a seed exactly: its thread draws from a seeded generator.
    #[cfg(feature = "__simulation")]
    if let Some(drawn) = crate::simulation::seeded_up_to(max) {
        return drawn;
    }
    rand::rng().random_range(Duration::ZERO..=max)
}
