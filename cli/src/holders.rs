//! Who holds a lease (each slot of a counted one), as one read saw it, and how an operator
//! reads it: `inspect` prints it, and `run` names the holder when it is refused or waits.

use std::time::Duration;

use leasehold::{FencingToken, HolderLabel, InspectOutcome, LeaseClient, LeaseRequest};

use crate::diagnose::Server;

/// What one lease (or slot) holds at the read: remaining time, token, label, and whether
/// the lease ended and this is its lock-delay (`remaining` then being the delay's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) remaining: Duration,
    pub(crate) token: FencingToken,
    pub(crate) holder: Option<HolderLabel>,
    pub(crate) delayed: bool,
}

/// Reads every slot of the lease `request` names (one for a plain lease) under its
/// attempt, in slot order: `None` for a free slot.
///
/// # Errors
/// One line saying why Redis could not be read.
pub(crate) async fn read(
    client: &LeaseClient,
    server: &Server,
    request: &LeaseRequest,
) -> Result<Vec<Option<Holder>>, String> {
    read_line(client, server, request)
        .await
        .map(|(held, _)| held)
}

/// [`read`], and how many entries the lease's line held at the read (`None`: the line could
/// not be read, say an ACL refuses `ZCARD`).
///
/// # Errors
/// One line saying why Redis could not be read.
pub(crate) async fn read_line(
    client: &LeaseClient,
    server: &Server,
    request: &LeaseRequest,
) -> Result<(Vec<Option<Holder>>, Option<u64>), String> {
    let reading = client.inspect_with_line(request).await;
    let waiting = reading.waiting;
    let slots = reading.slots;
    let mut held = Vec::with_capacity(slots.len());
    for outcome in slots {
        let holding = |remaining, token, holder, delayed| {
            Some(Holder {
                remaining,
                token,
                holder,
                delayed,
            })
        };
        held.push(match outcome {
            InspectOutcome::HeldByAttempt {
                remaining,
                token,
                holder,
            }
            | InspectOutcome::HeldByOther {
                remaining,
                token,
                holder,
            } => holding(remaining, token, holder, false),
            InspectOutcome::LockDelayed {
                remaining,
                token,
                holder,
            } => holding(remaining, token, holder, true),
            InspectOutcome::Absent => None,
            InspectOutcome::Unavailable { detail } => return Err(server.explain(&detail)),
            InspectOutcome::QueueFull { detail } => {
                return Err(format!("refused before sending: {}", detail.message));
            }
            InspectOutcome::Indeterminate { detail } => {
                return Err(format!("no readable reply: {}", server.explain(&detail)));
            }
        });
    }
    Ok((held, waiting))
}

/// How many wait, as a person reads it: `12 waiting`, `none waiting`; `None` when the line
/// could not be read (nothing is said then).
pub(crate) fn waiting(entries: Option<u64>) -> Option<String> {
    Some(match entries? {
        0 => "none waiting".to_owned(),
        n => format!("{n} waiting"),
    })
}

/// A holder as a person reads it: its label, or that it gave none.
pub(crate) fn label(holder: Option<&HolderLabel>) -> String {
    holder.map_or_else(
        || "a holder without a label".to_owned(),
        |h| h.as_str().to_owned(),
    )
}

/// A duration as lines show it: whole milliseconds, humantime's words.
pub(crate) fn time(d: Duration) -> String {
    let ms = Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    humantime::format_duration(ms).to_string()
}

/// A time left as a person glances at it: whole seconds from 10 s, tenths below.
pub(crate) fn about(d: Duration) -> String {
    let tenths = u64::try_from(d.as_millis().div_ceil(100)).unwrap_or(u64::MAX);
    let rounded = if tenths >= 100 {
        Duration::from_secs(tenths.div_ceil(10))
    } else {
        Duration::from_millis(tenths * 100)
    };
    humantime::format_duration(rounded).to_string()
}

/// Who holds what a read saw, in words: `held by web-7:4242 (fencing token 17), which ends
/// in 28s unless renewed`; for a counted lease every holder and the earliest end; for a
/// lock-delay how long it refuses holders. `None` when nothing is held.
pub(crate) fn describe(slots: &[Option<Holder>]) -> Option<String> {
    let held: Vec<&Holder> = slots.iter().flatten().collect();
    let first = held.iter().min_by_key(|h| h.remaining)?;
    if held.iter().all(|h| h.delayed) {
        return Some(format!(
            "in its lock-delay for {} more (its last holder, {}, ended without a release)",
            about(first.remaining),
            label(first.holder.as_ref())
        ));
    }
    if slots.len() == 1 {
        return Some(format!(
            "held by {} (fencing token {}), which ends in {} unless renewed",
            label(first.holder.as_ref()),
            first.token,
            about(first.remaining)
        ));
    }
    let names: Vec<String> = held
        .iter()
        .map(|h| {
            if h.delayed {
                format!("a lock-delay after {}", label(h.holder.as_ref()))
            } else {
                label(h.holder.as_ref())
            }
        })
        .collect();
    Some(format!(
        "{} of {} slots held, by {}; the first ends in {} unless renewed",
        held.len(),
        slots.len(),
        names.join(", "),
        about(first.remaining)
    ))
}

/// The JSON fields of what a read saw (for `--log-format json` lines): the holder, token
/// and remaining time of the slot that ends first.
pub(crate) fn fields(slots: &[Option<Holder>]) -> serde_json::Value {
    let first = slots.iter().flatten().min_by_key(|h| h.remaining);
    match first {
        Some(h) => serde_json::json!({
            "holder": h.holder.as_ref().map(HolderLabel::as_str),
            "fencing_token": h.token.get(),
            "remaining_ms": u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX),
            "lock_delay": h.delayed,
        }),
        None => serde_json::json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(ms: u64, token: u64, holder: Option<&str>, delayed: bool) -> Option<Holder> {
        Some(Holder {
            remaining: Duration::from_millis(ms),
            token: FencingToken::new(token),
            holder: holder.map(|h| HolderLabel::new(h).expect("label")),
            delayed,
        })
    }

    #[test]
    fn times_left_are_rounded_up_as_a_person_reads_them() {
        let ms = Duration::from_millis;
        assert_eq!(about(ms(27_400)), "28s");
        assert_eq!(about(ms(9_940)), "10s");
        assert_eq!(about(ms(1_230)), "1s 300ms");
        assert_eq!(about(ms(0)), "0s");
    }

    #[test]
    fn a_description_names_the_holder_its_token_and_its_end() {
        let one = [holding(27_400, 17, Some("web-7:4242"), false)];
        assert_eq!(
            describe(&one).as_deref(),
            Some("held by web-7:4242 (fencing token 17), which ends in 28s unless renewed")
        );
        assert_eq!(waiting(Some(12)).as_deref(), Some("12 waiting"));
        assert_eq!(waiting(Some(0)).as_deref(), Some("none waiting"));
        assert_eq!(waiting(None), None);
        let unlabelled = [holding(1_500, 3, None, false)];
        assert!(describe(&unlabelled).is_some_and(|d| d.contains("without a label")));
        let delayed = [holding(10_999, 3, Some("w:1"), true)];
        assert!(describe(&delayed).is_some_and(|d| d.starts_with("in its lock-delay for 11s")));
        let counted = [
            holding(9_000, 4, Some("a:1"), false),
            None,
            holding(1_960, 5, Some("b:2"), false),
        ];
        assert_eq!(
            describe(&counted).as_deref(),
            Some("2 of 3 slots held, by a:1, b:2; the first ends in 2s unless renewed")
        );
        assert_eq!(describe(&[None, None]), None);
    }
}
