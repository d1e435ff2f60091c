//! Redis values → typed replies. Anything unexpected is an `Err` with detail, which the
//! caller turns into `MaybeSent`: the script may have run, we just cannot read what it said.

use std::time::Duration;

use redis::Value;

use crate::protocol::{AcquireReply, FencingToken, InspectReply, ReleaseReply, RenewReply};

type Parsed<T> = Result<T, String>;

fn items(value: Value) -> Parsed<Vec<Value>> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(format!("expected an array reply, got {other:?}")),
    }
}

fn word(value: &Value) -> Parsed<&[u8]> {
    match value {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        other => Err(format!("expected a status word, got {other:?}")),
    }
}

fn int(items: &[Value], at: usize, what: &str) -> Parsed<i64> {
    match items.get(at) {
        Some(Value::Int(n)) => Ok(*n),
        other => Err(format!("expected integer {what} at {at}, got {other:?}")),
    }
}

/// A PTTL as Redis reports it: negative values (no expiry, no key) read as zero.
fn millis(items: &[Value], at: usize) -> Parsed<Duration> {
    Ok(Duration::from_millis(
        u64::try_from(int(items, at, "milliseconds")?).unwrap_or(0),
    ))
}

fn token(items: &[Value], at: usize) -> Parsed<FencingToken> {
    let n = int(items, at, "fencing token")?;
    u64::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .map(FencingToken::new)
        .ok_or_else(|| format!("fencing token {n} is not positive"))
}

fn status<'a>(items: &'a [Value], len: &[usize]) -> Parsed<&'a [u8]> {
    let first = items.first().ok_or("empty reply")?;
    let w = word(first)?;
    if !len.contains(&items.len()) {
        return Err(format!(
            "reply {:?} has {} elements",
            String::from_utf8_lossy(w),
            items.len()
        ));
    }
    Ok(w)
}

pub(super) fn acquire(value: Value) -> Parsed<AcquireReply> {
    let items = items(value)?;
    Ok(match status(&items, &[2, 3])? {
        b"ACQUIRED" if items.len() == 3 => AcquireReply::Acquired {
            ttl: millis(&items, 1)?,
            token: token(&items, 2)?,
        },
        b"REPLAYED" if items.len() == 3 => AcquireReply::Replayed {
            pttl: millis(&items, 1)?,
            token: token(&items, 2)?,
        },
        b"CONFLICT" if items.len() == 2 => AcquireReply::Conflict {
            pttl: millis(&items, 1)?,
        },
        b"CONTENDED" if items.len() == 2 => AcquireReply::Contended {
            pttl: millis(&items, 1)?,
        },
        other => return Err(unknown("acquire", other, items.len())),
    })
}

pub(super) fn renew(value: Value) -> Parsed<RenewReply> {
    let items = items(value)?;
    let w = status(&items, &[1])?;
    RenewReply::from_status(w).ok_or_else(|| unknown("renew", w, 1))
}

pub(super) fn release(value: Value) -> Parsed<ReleaseReply> {
    let items = items(value)?;
    let w = status(&items, &[1])?;
    ReleaseReply::from_status(w).ok_or_else(|| unknown("release", w, 1))
}

pub(super) fn inspect(value: Value) -> Parsed<InspectReply> {
    let items = items(value)?;
    Ok(match status(&items, &[1, 3])? {
        b"HELD_BY_ATTEMPT" if items.len() == 3 => InspectReply::HeldByAttempt {
            pttl: millis(&items, 1)?,
            token: token(&items, 2)?,
        },
        b"HELD_BY_OTHER" if items.len() == 3 => InspectReply::HeldByOther {
            pttl: millis(&items, 1)?,
            token: token(&items, 2)?,
        },
        b"ABSENT" if items.len() == 1 => InspectReply::Absent,
        other => return Err(unknown("inspect", other, items.len())),
    })
}

/// The reply of script call `id` with `n` items: one value per item, in order. An item's
/// value may be an error (`Value::ServerError`): that item's, for the caller to classify.
/// A reply that does not echo `id` first belongs to another call: an error.
pub(super) fn batch(value: Value, id: u64, n: usize) -> Parsed<Vec<Value>> {
    let mut items = items(value)?;
    if items.len() != n + 1 {
        return Err(format!(
            "batch reply has {} elements for {n} items",
            items.len()
        ));
    }
    let echo = word(&items[0])?;
    if echo != id.to_string().as_bytes() {
        return Err(format!(
            "batch reply echoes call id {:?}, not {id}: another call's reply",
            String::from_utf8_lossy(echo)
        ));
    }
    items.remove(0);
    Ok(items)
}

fn unknown(script: &str, status: &[u8], len: usize) -> String {
    format!(
        "unknown {script} reply {:?} with {len} elements",
        String::from_utf8_lossy(status)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn acquire_replies_decode() {
        let v = Value::Array(vec![bulk("ACQUIRED"), Value::Int(30_000), Value::Int(7)]);
        assert_eq!(
            acquire(v),
            Ok(AcquireReply::Acquired {
                ttl: Duration::from_secs(30),
                token: FencingToken::new(7)
            })
        );
        let v = Value::Array(vec![bulk("CONTENDED"), Value::Int(-1)]);
        assert_eq!(
            acquire(v),
            Ok(AcquireReply::Contended {
                pttl: Duration::ZERO
            })
        );
    }

    #[test]
    fn a_batch_reply_is_one_value_per_item_after_the_echoed_call_id() {
        let err = redis::parse_redis_value(b"-WRONGTYPE not a lease\r\n").unwrap();
        assert!(matches!(err, Value::ServerError(_)));
        let reply = Value::Array(vec![
            bulk("41"),
            Value::Array(vec![bulk("RENEWED")]),
            err.clone(),
        ]);
        let items = batch(reply.clone(), 41, 2).unwrap();
        assert_eq!(items[1], err, "an item's error is passed on, for that item");
        assert_eq!(renew(items[0].clone()), Ok(RenewReply::Renewed));
        // Another call's reply (the stream lost bytes), or a count that does not match.
        assert!(
            batch(reply.clone(), 42, 2)
                .unwrap_err()
                .contains("another call")
        );
        assert!(batch(reply, 41, 3).is_err());
        assert!(batch(Value::Array(vec![]), 41, 0).is_err());
        assert!(batch(Value::Nil, 41, 0).is_err());
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for v in [
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![bulk("ACQUIRED")]),
            Value::Array(vec![bulk("ACQUIRED"), bulk("x"), Value::Int(1)]),
            Value::Array(vec![bulk("ACQUIRED"), Value::Int(1), Value::Int(0)]),
            Value::Array(vec![bulk("WHAT"), Value::Int(1)]),
            Value::Array(vec![Value::Int(1), Value::Int(1)]),
        ] {
            assert!(acquire(v.clone()).is_err(), "{v:?}");
            assert!(inspect(v.clone()).is_err(), "{v:?}");
            assert!(renew(v.clone()).is_err(), "{v:?}");
        }
        assert!(renew(Value::Array(vec![bulk("RENEWED"), Value::Int(1)])).is_err());
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::super::*;

        /// Redis values, mostly shaped like our replies (a status word first) so the
        /// decoders get past the first check.
        fn value() -> impl Strategy<Value = Value> {
            const WORDS: &[&str] = &[
                "ACQUIRED",
                "REPLAYED",
                "CONFLICT",
                "CONTENDED",
                "RENEWED",
                "RELEASED",
                "ABSENT",
                "NOT_OWNER",
                "HELD_BY_ATTEMPT",
                "HELD_BY_OTHER",
            ];
            let word = prop_oneof![
                proptest::sample::select(WORDS).prop_map(str::to_owned),
                "[A-Z_]{0,12}",
            ];
            let leaf = prop_oneof![
                Just(Value::Nil),
                any::<i64>().prop_map(Value::Int),
                word.clone()
                    .prop_map(|w| Value::BulkString(w.as_bytes().to_vec())),
                word.prop_map(Value::SimpleString),
                proptest::collection::vec(any::<u8>(), 0..8).prop_map(Value::BulkString),
            ];
            leaf.prop_recursive(3, 16, 4, |inner| {
                proptest::collection::vec(inner, 0..5).prop_map(Value::Array)
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4_000))]

            /// No reply, however malformed, panics a decoder; what decodes is consistent.
            #[test]
            fn decoders_never_panic(v in value()) {
                if let Ok(
                    AcquireReply::Acquired { token, .. } | AcquireReply::Replayed { token, .. },
                ) = acquire(v.clone())
                {
                    prop_assert!(token.get() > 0);
                }
                let _ = renew(v.clone());
                let _ = release(v.clone());
                if let Ok(items) = batch(v.clone(), 7, 2) {
                    prop_assert_eq!(items.len(), 2);
                }
                if let Ok(InspectReply::HeldByAttempt { token, .. } | InspectReply::HeldByOther { token, .. }) = inspect(v) {
                    prop_assert!(token.get() > 0);
                }
            }
        }
    }
}
