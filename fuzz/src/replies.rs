//! The `script_reply` target's body: a script call's reply, as RESP bytes, through the
//! redis crate's parser and leasehold's decoders — what leasehold reads from Redis, where
//! the crate's other bodies read what a caller writes.

use leasehold::FailureKind;
use leasehold::fuzzing as decode;
use leasehold::fuzzing::{AcquireReply, InspectReply, ReleaseReply, RenewReply, SendFailure};
use redis::Value;

/// A script call's reply as Redis sends it (RESP bytes), read by the redis crate's parser
/// and decoded as leasehold decodes it: as a whole call's reply (`{id, item replies…}`, the
/// id taken from the reply itself), then each item's reply with every item decoder, and
/// error replies classified.
///
/// Rules: a call's reply decodes only under the id it echoes, written as leasehold writes
/// it, and for exactly its item count; a decoded status is the word the reply carries;
/// fencing tokens are positive; an error reply is `NotSent` only as `ServerRefused`.
pub fn script_reply(data: &[u8]) {
    let Ok(value) = redis::parse_redis_value(data) else {
        return;
    };
    item(&value);
    let (id, n) = echoed(&value);
    if let Ok(items) = decode::batch(value.clone(), id, n) {
        assert_eq!(items.len(), n);
        assert!(
            decode::batch(value.clone(), id.wrapping_add(1), n).is_err(),
            "another call's id accepted"
        );
        assert!(
            decode::batch(value.clone(), id, n + 1).is_err(),
            "another item count accepted"
        );
        for reply in &items {
            item(reply);
        }
    }
}

/// The call id a reply echoes (0 if it echoes none), and the item count it carries.
fn echoed(value: &Value) -> (u64, usize) {
    let Value::Array(items) = value else {
        return (0, 0);
    };
    let id = match items.first() {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok(),
        Some(Value::SimpleString(s)) => Some(s.as_str()),
        _ => None,
    }
    .and_then(|s| s.parse().ok())
    .unwrap_or(0);
    (id, items.len().saturating_sub(1))
}

/// One item's reply through every item decoder and the error classifier.
fn item(value: &Value) {
    let word = status_word(value);
    if let Ok(reply) = decode::acquire(value.clone()) {
        assert_eq!(word, Some(reply.status().as_bytes()));
        if let AcquireReply::Acquired { token, .. } | AcquireReply::Replayed { token, .. } = reply {
            assert!(token.get() > 0, "token {token} from {value:?}");
        }
    }
    if let Ok(reply) = decode::renew(value.clone()) {
        assert_eq!(word, Some(reply.status().as_bytes()));
        assert_eq!(
            RenewReply::from_status(reply.status().as_bytes()),
            Some(reply)
        );
    }
    if let Ok(reply) = decode::release(value.clone()) {
        assert_eq!(word, Some(reply.status().as_bytes()));
        assert_eq!(
            ReleaseReply::from_status(reply.status().as_bytes()),
            Some(reply)
        );
    }
    if let Ok(reply) = decode::inspect(value.clone()) {
        assert_eq!(word, Some(reply.status().as_bytes()));
        if let InspectReply::HeldByAttempt { token, .. } | InspectReply::HeldByOther { token, .. } =
            reply
        {
            assert!(token.get() > 0, "token {token} from {value:?}");
        }
    }
    match decode::error_reply(value.clone()) {
        None => assert!(!matches!(value, Value::ServerError(_))),
        Some(SendFailure::NotSent(detail)) => {
            assert_eq!(detail.kind, FailureKind::ServerRefused, "{value:?}");
        }
        Some(SendFailure::MaybeSent(detail)) => {
            assert_ne!(detail.kind, FailureKind::ServerRefused, "{value:?}");
            let _ = detail.to_string();
        }
    }
}

/// The first word of a one-line item reply: its status word.
fn status_word(value: &Value) -> Option<&[u8]> {
    let line: &[u8] = match value {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.as_bytes(),
        _ => return None,
    };
    line.split(|&b| b == b' ').next()
}
