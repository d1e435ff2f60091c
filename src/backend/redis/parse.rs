//! Redis values → typed replies. Anything unexpected is an `Err` with detail, which the
//! caller turns into `MaybeSent`: the script may have run, we just cannot read what it said.

use std::time::Duration;

use redis::Value;
use smallvec::SmallVec;

use crate::protocol::{
    AcquireReply, FencingToken, HolderLabel, InspectReply, Inspected, ReleaseReply, RenewReply,
};

type Parsed<T> = Result<T, String>;

fn word(value: &Value) -> Parsed<&[u8]> {
    match value {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        other => Err(format!("expected a status word, got {other:?}")),
    }
}

/// One item's reply: a line of words, the status word first, then its numbers.
struct Line<'a> {
    status: &'a [u8],
    /// Inline: a reply has at most six words after its status (an inspection's), and one
    /// is read per operation.
    numbers: SmallVec<[&'a [u8]; 6]>,
}

impl<'a> Line<'a> {
    fn read(value: &'a Value) -> Parsed<Self> {
        let mut words = word(value)?.split(|&b| b == b' ');
        let status = words
            .next()
            .filter(|w| !w.is_empty())
            .ok_or("empty reply")?;
        Ok(Self {
            status,
            numbers: words.collect(),
        })
    }

    fn int(&self, at: usize, what: &str) -> Parsed<i64> {
        let text = self.numbers.get(at).ok_or_else(|| format!("no {what}"))?;
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| {
                format!(
                    "{what} {:?} is not an integer",
                    String::from_utf8_lossy(text)
                )
            })
    }

    /// A PTTL as Redis reports it: negative values (no expiry, no key) read as zero.
    fn millis(&self, at: usize) -> Parsed<Duration> {
        Ok(Duration::from_millis(
            u64::try_from(self.int(at, "milliseconds")?).unwrap_or(0),
        ))
    }

    fn token(&self, at: usize) -> Parsed<FencingToken> {
        let n = self.int(at, "fencing token")?;
        u64::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .map(FencingToken::new)
            .ok_or_else(|| format!("fencing token {n} is not positive"))
    }

    /// The slot at `at` of a counted lease's reply; 0 (a plain lease's only slot) when the
    /// reply has none.
    fn slot(&self, at: usize) -> Parsed<u16> {
        if self.numbers.len() <= at {
            return Ok(0);
        }
        let n = self.int(at, "slot")?;
        u16::try_from(n).map_err(|_| format!("slot {n} is out of range"))
    }

    /// A waiting acquisition's rank in the line at `at`, if the reply has one.
    fn rank(&self, at: usize) -> Parsed<Option<u32>> {
        if self.numbers.len() <= at {
            return Ok(None);
        }
        let n = self.int(at, "rank")?;
        u32::try_from(n)
            .map(Some)
            .map_err(|_| format!("rank {n} is out of range"))
    }

    /// The line's entries at `at`: `-` when the script could not read the line.
    fn waiting(&self, at: usize) -> Parsed<Option<u64>> {
        if self.numbers.get(at).is_some_and(|w| *w == b"-") {
            return Ok(None);
        }
        let n = self.int(at, "line length")?;
        u64::try_from(n)
            .map(Some)
            .map_err(|_| format!("line length {n} is negative"))
    }

    /// The holder label at `at`, if the reply has one.
    fn holder(&self, at: usize) -> Parsed<Option<HolderLabel>> {
        self.numbers
            .get(at)
            .map(|text| {
                std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| HolderLabel::new(t).ok())
                    .ok_or_else(|| {
                        format!("holder {:?} is not a label", String::from_utf8_lossy(text))
                    })
            })
            .transpose()
    }

    fn unknown(&self, script: &str) -> String {
        format!(
            "unknown {script} reply {:?} with {} numbers",
            String::from_utf8_lossy(self.status),
            self.numbers.len()
        )
    }
}

pub(super) fn acquire(value: Value) -> Parsed<AcquireReply> {
    let line = Line::read(&value)?;
    Ok(match (line.status, line.numbers.len()) {
        (b"ACQUIRED", 2 | 3) => AcquireReply::Acquired {
            ttl: line.millis(0)?,
            token: line.token(1)?,
            slot: line.slot(2)?,
        },
        (b"REPLAYED", 2 | 3) => AcquireReply::Replayed {
            pttl: line.millis(0)?,
            token: line.token(1)?,
            slot: line.slot(2)?,
        },
        (b"CONFLICT", 1) => AcquireReply::Conflict {
            pttl: line.millis(0)?,
        },
        (b"CONTENDED", 1 | 2) => AcquireReply::Contended {
            pttl: line.millis(0)?,
            rank: line.rank(1)?,
        },
        (b"DELAYED", 1 | 2) => AcquireReply::Delayed {
            pttl: line.millis(0)?,
            rank: line.rank(1)?,
        },
        _ => return Err(line.unknown("acquire")),
    })
}

pub(super) fn renew(value: Value) -> Parsed<RenewReply> {
    let line = Line::read(&value)?;
    line.numbers
        .is_empty()
        .then(|| RenewReply::from_status(line.status))
        .flatten()
        .ok_or_else(|| line.unknown("renew"))
}

pub(super) fn release(value: Value) -> Parsed<ReleaseReply> {
    let line = Line::read(&value)?;
    line.numbers
        .is_empty()
        .then(|| ReleaseReply::from_status(line.status))
        .flatten()
        .ok_or_else(|| line.unknown("release"))
}

/// `LEFT`: the waiter is not in the line (any more).
pub(super) fn left(value: Value) -> Parsed<()> {
    let line = Line::read(&value)?;
    match (line.status, line.numbers.len()) {
        (b"LEFT", 0) => Ok(()),
        _ => Err(line.unknown("leave")),
    }
}

pub(super) fn kept(value: Value) -> Parsed<()> {
    let line = Line::read(&value)?;
    match (line.status, line.numbers.len()) {
        (b"KEPT", 0) => Ok(()),
        _ => Err(line.unknown("keep")),
    }
}

/// `<STATUS> <waiting> …`: the line's entries second (`-`: not read), then the lease's.
pub(super) fn inspect(value: Value) -> Parsed<Inspected> {
    let line = Line::read(&value)?;
    let reply = match (line.status, line.numbers.len()) {
        (b"HELD_BY_ATTEMPT", 3 | 4) => InspectReply::HeldByAttempt {
            pttl: line.millis(1)?,
            token: line.token(2)?,
            holder: line.holder(3)?,
        },
        (b"HELD_BY_OTHER", 3 | 4) => InspectReply::HeldByOther {
            pttl: line.millis(1)?,
            token: line.token(2)?,
            holder: line.holder(3)?,
        },
        (b"DELAYED", 3 | 4) => InspectReply::Delayed {
            pttl: line.millis(1)?,
            token: line.token(2)?,
            holder: line.holder(3)?,
        },
        (b"ABSENT", 1) => InspectReply::Absent,
        _ => return Err(line.unknown("inspect")),
    };
    Ok(Inspected {
        reply,
        waiting: line.waiting(0)?,
    })
}

/// The reply of script call `id` with `n` items (`lua/batch.lua`: one string, the call's
/// id then each item's reply, a line each): one value per item, in order — its line as a
/// bulk string, or, for a line that starts with `-`, the item's error
/// (`Value::ServerError`), for the caller to classify. A reply that does not echo `id`
/// first belongs to another call: an error.
pub(super) fn batch(value: Value, id: u64, n: usize) -> Parsed<Vec<Value>> {
    let text = match &value {
        Value::BulkString(text) => text.as_slice(),
        other => return Err(format!("expected a batch reply string, got {other:?}")),
    };
    let mut lines = text.split(|&b| b == b'\n');
    let echo = lines.next().unwrap_or_default();
    if echo != id.to_string().as_bytes() {
        return Err(format!(
            "batch reply echoes call id {:?}, not {id}: another call's reply",
            String::from_utf8_lossy(echo)
        ));
    }
    let mut items = Vec::with_capacity(n);
    for line in lines {
        if items.len() == n {
            return Err(format!("batch reply has more than {n} item replies"));
        }
        items.push(item_reply(line)?);
    }
    if items.len() != n {
        return Err(format!(
            "batch reply has {} item replies for {n} items",
            items.len()
        ));
    }
    Ok(items)
}

/// One line of a batch reply as the value Redis would have sent for it alone.
fn item_reply(line: &[u8]) -> Parsed<Value> {
    if line.first() != Some(&b'-') {
        return Ok(Value::BulkString(line.to_vec()));
    }
    // An error, in the wire's own form so that it is read as every other error is.
    if line.contains(&b'\r') {
        return Err("an item's error reply holds a line break".to_owned());
    }
    let wire = [line, b"\r\n"].concat();
    match redis::parse_redis_value(&wire) {
        Ok(error @ Value::ServerError(_)) => Ok(error),
        other => Err(format!(
            "an item's error reply does not read as one: {other:?}"
        )),
    }
}

/// The replies of native call `id` whose items sent `widths` commands each, after `ASKING`
/// when `asking` (`batch::native_pipeline`): each item's first command's reply, in order —
/// an error reply (`Value::ServerError`) being the item's. A pipeline whose last reply is
/// not the `PING` of `id` was answered by replies of another call: an error.
pub(super) fn native(
    mut values: Vec<Value>,
    id: u64,
    widths: &[usize],
    asking: bool,
) -> Parsed<Vec<Value>> {
    let expected: usize = widths
        .iter()
        .map(|w| w + usize::from(asking))
        .sum::<usize>()
        + 1;
    if values.len() != expected {
        return Err(format!(
            "native call reply has {} elements for {expected} commands",
            values.len()
        ));
    }
    let echo = values.pop().ok_or("no reply")?;
    let echo = word(&echo)?;
    if echo != id.to_string().as_bytes() {
        return Err(format!(
            "native call reply echoes call id {:?}, not {id}: another call's reply",
            String::from_utf8_lossy(echo)
        ));
    }
    let mut values = values.into_iter();
    let mut replies = Vec::with_capacity(widths.len());
    for width in widths {
        let mut group = values.by_ref().take(width + usize::from(asking));
        replies.extend(group.nth(usize::from(asking)));
        group.for_each(drop);
    }
    Ok(replies)
}

#[cfg(test)]
mod tests;
