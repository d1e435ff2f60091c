//! How a supervisor paces its acquisitions, sans I/O: a pause after a term ends, a pause
//! doubling per consecutive failed acquisition, each jittered so a fleet does not stampede.

use std::time::Duration;

use crate::lease::AcquireOutcome;
use crate::runtime::supervisor::SupervisorConfig;

/// The pause before the next acquisition.
#[derive(Debug, Clone)]
pub(crate) struct Pacing {
    config: SupervisorConfig,
    /// The pause after the next failure (doubled by each one).
    backoff: Duration,
}

impl Pacing {
    pub(crate) fn new(config: SupervisorConfig) -> Pacing {
        Pacing {
            config,
            backoff: config.backoff_min,
        }
    }

    /// An acquisition failed; `hint` is what it said about when to try again (a contended
    /// lease's remaining time). The pause before the next one, before jitter.
    pub(crate) fn handle_failure(&mut self, hint: Option<Duration>) -> Duration {
        let pause = hint.unwrap_or(self.backoff);
        self.backoff = (self.backoff * 2).min(self.config.backoff_max);
        pause
    }

    /// A term ended (lost, failed, aborted): the shortest pause, and the failures'
    /// doubling starts over.
    pub(crate) fn handle_term_end(&mut self) -> Duration {
        self.backoff = self.config.backoff_min;
        self.config.backoff_min
    }
}

/// What an acquisition that did not take the lease says about the pause before the next
/// one, for [`Pacing::handle_failure`]: nothing at all (`Some(ZERO)`) for a contended lease
/// (or one in its lock-delay) — the acquisition already waited, listening for its release,
/// as long as a wait may last — and `None` (back off) for anything else.
pub(crate) fn retry_hint(outcome: &AcquireOutcome) -> Option<Duration> {
    match outcome {
        AcquireOutcome::Contended { .. } | AcquireOutcome::LockDelayed { .. } => {
            Some(Duration::ZERO)
        }
        _ => None,
    }
}

/// `pause` ± 25 %: enough to spread a fleet, small enough to keep the pacing recognisable.
pub(crate) fn jittered(pause: Duration) -> Duration {
    if pause.is_zero() {
        return pause;
    }
    let quarter = pause / 4;
    pause - quarter + crate::jitter::up_to(quarter * 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn failures_double_the_pause_up_to_the_bound_and_a_term_starts_over() {
        let mut pacing = Pacing::new(SupervisorConfig {
            backoff_min: 100 * MS,
            backoff_max: 1000 * MS,
        });
        let rows: &[(&str, Option<Option<Duration>>, Duration)] = &[
            ("first failure", Some(None), 100 * MS),
            ("second", Some(None), 200 * MS),
            ("a hint wins", Some(Some(42 * MS)), 42 * MS),
            ("the doubling went on under the hint", Some(None), 800 * MS),
            ("bounded", Some(None), 1000 * MS),
            ("still bounded", Some(None), 1000 * MS),
            ("a term ends", None, 100 * MS),
            ("failures start over", Some(None), 100 * MS),
        ];
        for &(name, failure, expected) in rows {
            let got = match failure {
                Some(hint) => pacing.handle_failure(hint),
                None => pacing.handle_term_end(),
            };
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn a_contended_lease_is_tried_again_at_once_and_other_outcomes_back_off() {
        let contended = AcquireOutcome::Contended {
            retry_after: 700 * MS,
        };
        assert_eq!(retry_hint(&contended), Some(Duration::ZERO));
        let unavailable = AcquireOutcome::Unavailable {
            detail: crate::backend::FailureDetail::new(
                crate::backend::FailureKind::Timeout,
                "test",
            ),
        };
        assert_eq!(retry_hint(&unavailable), None);
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..1000 {
            let got = jittered(400 * MS);
            assert!((300 * MS..=500 * MS).contains(&got), "{got:?}");
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
