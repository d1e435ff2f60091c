//! Durations as the command line takes them — an option's text (humantime or a bare number
//! of seconds) or a `LEASEHOLD_*` variable's (humantime) — and what a refused one says: one
//! line naming the option or variable, the value as given, what is wrong with it and what
//! is accepted (`--wait 2h: above the maximum of 1h; give one within 0s ..= 1h`), in the
//! user's words, never the library's parameter names (`wait_timeout`).

use std::fmt;
use std::time::Duration;

use leasehold::protocol::limits::{self, DurationBounds};
use leasehold::{DurationProblem, LeaseError};

/// A value an option's parser refused, as a line that names the option itself: printed as
/// it is, without clap's `invalid value '…' for '…'`, which would name both twice.
#[derive(Debug)]
pub(crate) struct BadValue(String);

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadValue {}

/// What a duration option or variable accepts, for the fix a refusal ends with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accepted {
    pub(crate) min: Duration,
    pub(crate) max: Duration,
    /// The minimum is the shortest the settings in force allow (`--ttl`), not a fixed bound.
    pub(crate) in_force: bool,
    /// A bare number of seconds is read too (an option's value; a variable is humantime).
    pub(crate) bare_seconds: bool,
}

impl Accepted {
    /// An option's value within `bounds`.
    fn option(bounds: DurationBounds) -> Self {
        Accepted {
            min: bounds.min,
            max: bounds.max,
            in_force: false,
            bare_seconds: true,
        }
    }

    /// A variable's value within `bounds`.
    fn variable(bounds: DurationBounds) -> Self {
        Accepted {
            bare_seconds: false,
            ..Accepted::option(bounds)
        }
    }

    /// `give one within 0s ..= 1h`, with the forms a value takes when `forms`.
    fn fix(&self, forms: bool) -> String {
        let in_force = if self.in_force {
            " with the settings in force"
        } else {
            ""
        };
        let like = if forms {
            self.examples()
        } else {
            String::new()
        };
        format!(
            "give one within {} ..= {}{in_force}{like}",
            h(self.min),
            h(self.max)
        )
    }

    /// `, like 250ms, 30s or a number of seconds`: the forms a value takes, by examples
    /// within the range (a bare number is not one for a variable).
    fn examples(&self) -> String {
        let mut forms: Vec<&str> = [("250ms", 250), ("30s", 30_000), ("1m 30s", 90_000)]
            .into_iter()
            .filter(|(_, ms)| (self.min..=self.max).contains(&Duration::from_millis(*ms)))
            .map(|(text, _)| text)
            .collect();
        if self.bare_seconds {
            forms.push("a number of seconds");
        }
        match forms.split_last() {
            None => String::new(),
            Some((last, [])) => format!(", like {last}"),
            Some((last, rest)) => format!(", like {} or {last}", rest.join(", ")),
        }
    }
}

/// What is wrong with a duration.
#[derive(Debug)]
enum Problem {
    Negative,
    Unreadable(String),
    Below,
    Above,
}

/// `flag`'s value within `bounds`.
///
/// # Errors
/// The refusal: unreadable, negative, or out of `bounds`.
pub(crate) fn option(flag: &str, bounds: DurationBounds, text: &str) -> Result<Duration, BadValue> {
    let accepted = Accepted::option(bounds);
    let value = up_to(flag, accepted, text)?;
    if value < accepted.min {
        return Err(refusal(flag, text, Problem::Below, accepted));
    }
    Ok(value)
}

/// `flag`'s value, at most `accepted.max`: its minimum is checked where all it depends on
/// is known (`--ttl`'s, with the request: `crate::ttl::check`).
///
/// # Errors
/// The refusal: unreadable, negative, or above the maximum.
pub(crate) fn up_to(flag: &str, accepted: Accepted, text: &str) -> Result<Duration, BadValue> {
    let value = read(text).map_err(|problem| refusal(flag, text, problem, accepted))?;
    if value > accepted.max {
        return Err(refusal(flag, text, Problem::Above, accepted));
    }
    Ok(value)
}

fn refusal(flag: &str, text: &str, problem: Problem, accepted: Accepted) -> BadValue {
    BadValue(say(&format!("{flag} {}", shown(text)), &problem, accepted))
}

/// `named` (`--wait 2h`, `LEASEHOLD_RENEW_EVERY=2h`): what is wrong; what is accepted.
fn say(named: &str, problem: &Problem, accepted: Accepted) -> String {
    match problem {
        Problem::Negative => format!(
            "{named}: a duration is never negative; {}",
            accepted.fix(true)
        ),
        Problem::Unreadable(reason) => {
            format!("{named}: not a duration ({reason}); {}", accepted.fix(true))
        }
        Problem::Below => format!(
            "{named}: below the minimum of {}; {}",
            h(accepted.min),
            accepted.fix(false)
        ),
        Problem::Above => format!(
            "{named}: above the maximum of {}; {}",
            h(accepted.max),
            accepted.fix(false)
        ),
    }
}

/// Humantime (`1m 30s`, `250ms`), or a bare number of seconds (`10`, `0.5`) as flock(1)
/// and timeout(1) take it.
fn read(text: &str) -> Result<Duration, Problem> {
    let text = text.trim();
    if let Some(d) = bare_seconds(text) {
        return Ok(d);
    }
    if let Some(rest) = text.strip_prefix('-')
        && read(rest).is_ok()
    {
        return Err(Problem::Negative);
    }
    humantime::parse_duration(text).map_err(|e| Problem::Unreadable(e.to_string()))
}

/// `10`, `0.5`, `.25`: seconds; `None` for anything else (units, signs, exponents).
fn bare_seconds(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    let secs: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    // Nanoseconds: the first nine digits of the fraction.
    let mut nanos = 0u32;
    for (i, b) in fraction.bytes().take(9).enumerate() {
        nanos += u32::from(b - b'0') * 10u32.pow(8 - u32::try_from(i).ok()?);
    }
    Some(Duration::new(secs, nanos))
}

/// The bounds of each duration the library checks, by the parameter name its errors use.
const BOUNDS: [DurationBounds; 11] = [
    limits::TTL,
    limits::WAIT_TIMEOUT,
    limits::REPLICA_WAIT,
    limits::LOCK_DELAY,
    limits::LIST_BUDGET,
    limits::RENEW_EVERY,
    limits::SAFETY_MARGIN,
    limits::COMMAND_TIMEOUT,
    limits::CONNECT_TIMEOUT,
    limits::DRIFT_BUDGET,
    limits::RETRY_AFTER_FALLBACK,
];

fn bounds_of(param: &str) -> Option<DurationBounds> {
    BOUNDS.iter().copied().find(|b| b.param == param)
}

/// A library error about a variable's duration (`text` its value), in the user's words.
pub(crate) fn variable_error(var: &str, text: &str, e: &LeaseError) -> String {
    let named = format!("{var}={}", shown(text));
    let LeaseError::InvalidDuration { param, problem } = e else {
        return format!("{named}: {e}");
    };
    let accepted = bounds_of(param).map(Accepted::variable);
    relayed(&named, param, problem, accepted)
}

/// A library error about an option's duration, in the user's words: the option `flag`
/// (which the caller found from the error's parameter), the value the error carries, and
/// whether that is the option's default rather than a value the user gave.
pub(crate) fn option_error(flag: &str, defaulted: bool, e: &LeaseError) -> String {
    let LeaseError::InvalidDuration { param, problem } = e else {
        return format!("{flag}: {e}");
    };
    let default = if defaulted { " (the default)" } else { "" };
    let named = match value(problem) {
        Some(value) => format!("{flag} {value}{default}"),
        None => flag.to_owned(),
    };
    relayed(
        &named,
        param,
        problem,
        bounds_of(param).map(Accepted::option),
    )
}

fn value(problem: &DurationProblem) -> Option<String> {
    match problem {
        DurationProblem::NotADuration { text, .. } => Some(shown(text)),
        DurationProblem::BelowMinimum { value, .. }
        | DurationProblem::AboveMaximum { value, .. }
        | DurationProblem::NotGreaterThan { value, .. }
        | DurationProblem::NotAtLeast { value, .. }
        | DurationProblem::NotLessThan { value, .. } => Some(h(*value)),
        _ => None,
    }
}

/// `problem` of `param` (its value named in `named`), accepted within `accepted` when the
/// bounds are known.
fn relayed(
    named: &str,
    param: &str,
    problem: &DurationProblem,
    accepted: Option<Accepted>,
) -> String {
    let bounded = |problem: Problem, fallback: String| match accepted {
        Some(accepted) => say(named, &problem, accepted),
        None => format!("{named}: {fallback}"),
    };
    match problem {
        DurationProblem::NotADuration { text, reason } => {
            // A number is negative whether or not it has the unit a variable needs.
            let negative = matches!(read(text), Err(Problem::Negative));
            let problem = if negative {
                Problem::Negative
            } else {
                Problem::Unreadable(reason.clone())
            };
            bounded(problem, format!("not a duration ({reason})"))
        }
        DurationProblem::BelowMinimum { min, .. } => {
            bounded(Problem::Below, format!("below the minimum of {}", h(*min)))
        }
        DurationProblem::AboveMaximum { max, .. } => {
            bounded(Problem::Above, format!("above the maximum of {}", h(*max)))
        }
        DurationProblem::NotLessThan {
            other, other_value, ..
        } => relation(named, param, "less than", other, *other_value),
        DurationProblem::NotAtLeast {
            other, other_value, ..
        } => relation(named, param, "at least", other, *other_value),
        DurationProblem::NotGreaterThan {
            other, other_value, ..
        } => relation(named, param, "more than", other, *other_value),
        other => format!("{named}: {other}"),
    }
}

/// `--replica-wait 900ms: must be less than ttl − drift budget − … (824ms); give less than
/// 824ms, or a longer --ttl`. The bound is shown in whole milliseconds, rounded so that
/// what it says of a value in whole milliseconds holds.
fn relation(named: &str, param: &str, how: &str, other: &str, other_value: Duration) -> String {
    let or = match param {
        "replica_wait" | "renew_every" => ", or a longer --ttl",
        "safety_margin" => ", or a shorter LEASEHOLD_COMMAND_TIMEOUT",
        "ttl" => ", or a shorter LEASEHOLD_DRIFT_BUDGET",
        _ => "",
    };
    let nanos = other_value.as_nanos();
    let ms = if how == "more than" {
        nanos / 1_000_000
    } else {
        nanos.div_ceil(1_000_000)
    };
    let value = h(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)));
    format!(
        "{named}: must be {how} {} ({value}); give {how} {value}{or}",
        words(other)
    )
}

/// A parameter expression in the user's words: `ttl - drift_budget` → `ttl − drift budget`.
fn words(expression: &str) -> String {
    expression
        .split(" - ")
        .map(|param| match param {
            "renew_every" => "renewal period".to_owned(),
            "command_timeout" => "the command timeout".to_owned(),
            other => other.replace('_', " "),
        })
        .collect::<Vec<_>>()
        .join(" − ")
}

/// The value as given, quoted when it is empty or has spaces (`"1m 30s"`), at most 80
/// characters.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    let plain = !cut.is_empty()
        && !cut
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"');
    if plain { cut } else { format!("{cut:?}") }
}

fn h(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_option_the_value_and_what_is_accepted() {
        let wait = |text: &str| option("--wait", limits::WAIT_TIMEOUT, text);
        let cases = [
            (
                "2h",
                "--wait 2h: above the maximum of 1h; give one within 0s ..= 1h",
            ),
            (
                "-1",
                "--wait -1: a duration is never negative; give one within 0s ..= 1h",
            ),
            (
                "-1m 30s",
                "--wait \"-1m 30s\": a duration is never negative",
            ),
            ("soon", "--wait soon: not a duration ("),
        ];
        for (text, words) in cases {
            let line = wait(text).expect_err(text).to_string();
            assert!(line.starts_with(words), "{text} → {line}");
            assert!(!line.contains("wait_timeout"), "{line}");
        }
        let line = option("--lock-delay", limits::LOCK_DELAY, "0").expect_err("0");
        assert_eq!(
            line.to_string(),
            "--lock-delay 0: below the minimum of 1ms; give one within 1ms ..= 1h"
        );
        assert_eq!(wait("7200").ok(), None);
        assert_eq!(wait("0.5").ok(), Some(Duration::from_millis(500)));
        assert_eq!(wait("1m 30s").ok(), Some(Duration::from_secs(90)));
    }

    #[test]
    fn a_library_error_reads_in_the_users_words() {
        let line = variable_error(
            "LEASEHOLD_RENEW_EVERY",
            "2h",
            &limits::RENEW_EVERY
                .check(Duration::from_secs(7200))
                .expect_err("2h"),
        );
        assert_eq!(
            line,
            "LEASEHOLD_RENEW_EVERY=2h: above the maximum of 1h; give one within 10ms ..= 1h"
        );
        let e = LeaseError::InvalidDuration {
            param: "replica_wait",
            problem: DurationProblem::NotLessThan {
                value: Duration::from_millis(900),
                other: "ttl - drift_budget - safety_margin - renew_every",
                other_value: Duration::from_millis(824),
            },
        };
        assert_eq!(
            option_error("--replica-wait", false, &e),
            "--replica-wait 900ms: must be less than ttl − drift budget − safety margin − \
             renewal period (824ms); give less than 824ms, or a longer --ttl"
        );
        let line = variable_error(
            "LEASEHOLD_DRIFT_BUDGET",
            "-5",
            &LeaseError::InvalidDuration {
                param: "drift_budget",
                problem: DurationProblem::NotADuration {
                    text: "-5".to_owned(),
                    reason: "expected number at 0".to_owned(),
                },
            },
        );
        assert_eq!(
            line,
            "LEASEHOLD_DRIFT_BUDGET=-5: a duration is never negative; give one within \
             0s ..= 1m, like 250ms or 30s"
        );
    }
}
