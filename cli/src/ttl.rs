//! The shortest `--ttl` the settings in force allow, as `--help` states it and as an error
//! names it: renewals must come sooner than `ttl − drift budget − safety margin`
//! ([`LeaseSettings::check_renewal_cadence`]), so the minimum depends on the renewal
//! cadence (ttl/3 unless `--renew-every`), the drift budget and the safety margin (one
//! command timeout unless set) — not only on the library's fixed 100 ms.

use std::time::Duration;

use leasehold::LeaseSettings;
use leasehold::protocol::limits;

use crate::durations::Accepted;
use crate::variables;

/// `--ttl`'s default.
pub(crate) const DEFAULT: Duration = Duration::from_secs(30);

const MS: Duration = Duration::from_millis(1);

/// The shortest TTL (whole milliseconds) `settings` renew in time; `None` when no TTL up to
/// the longest does.
pub(crate) fn minimum(settings: &LeaseSettings) -> Option<Duration> {
    let floor = settings.drift_budget + settings.safety_margin();
    let estimate = match settings.renew_every {
        Some(every) => every + floor,
        None => floor * 3 / 2,
    };
    let mut ttl = whole_ms(estimate).max(limits::TTL.min);
    // The estimate is the exact bound rounded down: a few steps at most.
    for _ in 0..16 {
        if ttl > limits::TTL.max {
            return None;
        }
        if settings.check_renewal_cadence(ttl).is_ok() {
            return Some(ttl);
        }
        ttl += MS;
    }
    None
}

/// How the renewal cadence was chosen: by a flag, a variable, or the default ttl/3.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cadence {
    Default,
    Flag,
    Variable,
}

/// What `--ttl` accepts as its value is read, before `--renew-every` is known: up to the
/// longest lease, from the shortest the environment's settings allow (as `--help` says).
pub(crate) fn accepted() -> Accepted {
    let settings = LeaseSettings::from_env().unwrap_or_default();
    let shortest = minimum(&settings);
    Accepted {
        min: shortest.unwrap_or(limits::TTL.min),
        max: limits::TTL.max,
        in_force: shortest.is_some_and(|min| min > limits::TTL.min),
        bare_seconds: true,
    }
}

/// Checks that a lease of `ttl` can be held and renewed under `settings`.
///
/// # Errors
/// One line naming what the user set — `--ttl`, or `--renew-every` /
/// `LEASEHOLD_RENEW_EVERY` when that is what does not fit — with its value, the settings in
/// force and the variables they came from, and the one minimum that applies.
pub(crate) fn check(
    settings: &LeaseSettings,
    ttl: Duration,
    ttl_given: bool,
    cadence: Cadence,
) -> Result<(), String> {
    let renews = settings.check_renewal_cadence(ttl).is_ok();
    if renews && ttl >= limits::TTL.min {
        return Ok(());
    }
    let ttl_text = if ttl_given {
        format!("--ttl {}", h(ttl))
    } else {
        format!("--ttl {} (the default)", h(ttl))
    };
    Err(match cadence {
        Cadence::Flag | Cadence::Variable if !renews => misfit(settings, ttl, &ttl_text, cadence),
        _ => too_short(settings, &ttl_text),
    })
}

/// `ttl_text` is below the one minimum that applies: the shortest lease leasehold takes, or,
/// when renewing every ttl/3 needs more, what that needs, and what lowers it.
fn too_short(settings: &LeaseSettings, ttl_text: &str) -> String {
    let Some(min) = minimum(settings) else {
        return format!(
            "{ttl_text}: no ttl up to {} can be renewed in time with {}; lower {}",
            h(limits::TTL.max),
            margins(settings),
            lowering(settings)
        );
    };
    let fix = format!("give one within {} ..= {}", h(min), h(limits::TTL.max));
    if min <= limits::TTL.min {
        return format!(
            "{ttl_text}: below the minimum of {}, the shortest lease leasehold takes; {fix}",
            h(min)
        );
    }
    format!(
        "{ttl_text}: below the minimum of {}, which renewing every ttl/3 needs with {}; {fix}, \
         or lower the minimum with --renew-every or a shorter {}",
        h(min),
        margins(settings),
        lowering(settings)
    )
}

/// `--renew-every` (or its variable) does not fit the lease of `ttl`.
fn misfit(settings: &LeaseSettings, ttl: Duration, ttl_text: &str, cadence: Cadence) -> String {
    let name = match cadence {
        Cadence::Flag => "--renew-every",
        _ => variables::RENEW_EVERY,
    };
    let window = ttl
        .saturating_sub(settings.drift_budget)
        .saturating_sub(settings.safety_margin());
    let longer = minimum(settings).map_or_else(
        || format!("no ttl up to {} fits it", h(limits::TTL.max)),
        |min| format!("give --ttl {} or more", h(min)),
    );
    // No cadence fits a window shorter than the shortest one: only a longer TTL helps.
    let shorter = if window > limits::RENEW_EVERY.min {
        format!(", or a {name} under {}", h(window))
    } else {
        String::new()
    };
    format!(
        "{name} {} does not fit {ttl_text}: it must be less than ttl − drift budget − safety \
         margin ({}), with {}; {longer}{shorter}",
        h(settings.renewal_cadence(ttl)),
        h(window),
        margins(settings)
    )
}

/// The variables whose shorter values lower the shortest TTL: the safety margin's (or the
/// command timeout's, which it is unless set), and the drift budget's when one was set.
fn lowering(settings: &LeaseSettings) -> String {
    let margin = if settings.safety_margin.is_some() {
        variables::SAFETY_MARGIN
    } else {
        variables::COMMAND_TIMEOUT
    };
    if std::env::var_os(variables::DRIFT_BUDGET).is_some() {
        format!("{} or {margin}", variables::DRIFT_BUDGET)
    } else {
        margin.to_owned()
    }
}

fn h(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// `a drift budget of 10ms and a safety margin of 200ms (the command timeout)`, naming the
/// variable each came from when one was set.
fn margins(settings: &LeaseSettings) -> String {
    let set = |var: &str| std::env::var_os(var).is_some();
    let drift = if set(variables::DRIFT_BUDGET) {
        format!(" ({})", variables::DRIFT_BUDGET)
    } else {
        String::new()
    };
    let margin = match (
        settings.safety_margin.is_some(),
        set(variables::COMMAND_TIMEOUT),
    ) {
        (true, _) => format!(" ({})", variables::SAFETY_MARGIN),
        (false, true) => format!(" (the command timeout, {})", variables::COMMAND_TIMEOUT),
        (false, false) => " (the command timeout)".to_owned(),
    };
    format!(
        "a drift budget of {}{drift} and a safety margin of {}{margin}",
        h(settings.drift_budget),
        h(settings.safety_margin())
    )
}

/// `--ttl`'s help, with the minimum under the settings the environment gives (defaults if
/// it gives invalid ones: the run itself says what is wrong with them).
pub(crate) fn help() -> String {
    let settings = LeaseSettings::from_env().unwrap_or_default();
    help_with(&settings, "with the settings in force")
}

/// `--ttl`'s help as the manual page and the completions state it: the minimum under the
/// default settings, whatever the environment of the machine that generated them, which is
/// not the reader's.
pub(crate) fn documented_help() -> String {
    help_with(
        &LeaseSettings::default(),
        "with the default settings (`leasehold run --help` states it for the settings in force)",
    )
}

/// `--ttl`'s help with the minimum under `settings`, which `which` names.
fn help_with(settings: &LeaseSettings, which: &str) -> String {
    let min = minimum(settings).map_or_else(
        || "none".to_owned(),
        |d| humantime::format_duration(d).to_string(),
    );
    format!(
        "Lease time to live, renewed while the command runs: {min} ..= 1h {which}. The \
         minimum is 1.5 × (drift budget + safety margin) when renewing every ttl/3, \
         renew-every + drift budget + safety margin with --renew-every; the safety margin is \
         the command timeout unless LEASEHOLD_SAFETY_MARGIN [default: {}]",
        humantime::format_duration(DEFAULT)
    )
}

fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimum_is_the_shortest_ttl_the_cadence_check_accepts() {
        let cases = [
            LeaseSettings::default(),
            LeaseSettings::default().with_command_timeout(Duration::from_millis(500)),
            LeaseSettings::default().with_renew_every(Duration::from_secs(1)),
            LeaseSettings::default().with_drift_budget(Duration::from_millis(7)),
        ];
        for settings in cases {
            let min = minimum(&settings).expect("some ttl works");
            assert!(settings.check_renewal_cadence(min).is_ok(), "{settings:?}");
            if min > limits::TTL.min {
                assert!(
                    settings.check_renewal_cadence(min - MS).is_err(),
                    "{settings:?}: {min:?} is not the shortest"
                );
            }
        }
        // Defaults: 1.5 × (10 ms + 200 ms) = 315 ms, which is not enough (ttl/3 must be
        // strictly less): 316 ms.
        assert_eq!(
            minimum(&LeaseSettings::default()),
            Some(Duration::from_millis(316))
        );
    }

    #[test]
    fn the_error_names_what_the_user_set() {
        let settings = LeaseSettings::default();
        let line = check(
            &settings,
            Duration::from_millis(200),
            true,
            Cadence::Default,
        )
        .expect_err("too short");
        assert!(
            line.starts_with("--ttl 200ms: below the minimum of 316ms"),
            "{line}"
        );
        assert_eq!(line.matches("minimum of").count(), 1, "{line}");
        assert!(
            line.contains("--renew-every or a shorter LEASEHOLD_"),
            "{line}"
        );
        assert!(!line.contains("renew-every 66"), "{line}");
        let settings = settings.with_renew_every(Duration::from_secs(2));
        let line = check(&settings, Duration::from_secs(1), true, Cadence::Flag)
            .expect_err("does not fit");
        assert!(
            line.starts_with("--renew-every 2s does not fit --ttl 1s"),
            "{line}"
        );
        assert!(line.contains("give --ttl 2s 211ms or more"), "{line}");
        // Where renewing needs less than the shortest lease, that is the one minimum named.
        let fast = LeaseSettings::default().with_command_timeout(Duration::from_millis(10));
        let line = check(&fast, Duration::from_millis(50), true, Cadence::Default)
            .expect_err("below the floor");
        assert_eq!(
            line,
            "--ttl 50ms: below the minimum of 100ms, the shortest lease leasehold takes; give \
             one within 100ms ..= 1h"
        );
    }
}
