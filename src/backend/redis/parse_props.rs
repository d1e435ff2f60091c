//! Property tests of the reply decoders (`parse`): no reply, however malformed, panics one,
//! and the replies of a call of the server's own commands, in the shapes its commands
//! return them, decode to each item's own reply.

use proptest::collection::vec;
use proptest::prelude::*;
use redis::Value;

use super::parse::{acquire, batch, inspect, native, release, renew};
use crate::protocol::{AcquireReply, InspectReply};

/// Redis values, mostly shaped like our replies (a status word first) so the
/// decoders get past the first check.
fn value() -> impl Strategy<Value = Value> {
    const WORDS: &[&str] = &[
        "ACQUIRED",
        "REPLAYED",
        "CONFLICT",
        "CONTENDED",
        "DELAYED",
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
    // A status word and up to three numbers, as the script prints them, or not.
    let number = prop_oneof![any::<i64>().prop_map(|n| n.to_string()), "[-0-9a-z ]{0,6}"];
    let line = (word.clone(), proptest::collection::vec(number, 0..4)).prop_map(|(w, numbers)| {
        let mut text = w;
        for n in numbers {
            text.push(' ');
            text.push_str(&n);
        }
        Value::BulkString(text.into_bytes())
    });
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<i64>().prop_map(Value::Int),
        line,
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
        // A random array is hardly ever a native call's reply: what those decode to is
    // `native_replies_decode_to_each_items_first_reply`'s.
    if let Value::Array(values) = &v {
        for (widths, asking) in [(&[1, 2][..], false), (&[1][..], true)] {
            let _ = native(values.clone(), 7, widths, asking);
        }
    }
    if let Ok(InspectReply::HeldByAttempt { token, .. } | InspectReply::HeldByOther { token, .. }) = inspect(v).map(|i| i.reply) {
            prop_assert!(token.get() > 0);
        }
    }
}

/// An error reply, as the server sends one for an item's command.
fn error() -> Value {
    redis::parse_redis_value(b"-WRONGTYPE Operation against a key holding the wrong kind\r\n")
        .unwrap_or(Value::Nil)
}

/// One item's replies as the server's own commands return them
/// (`batch::Item::add_native`): a renewal's `SET … IFEQ … GET` — the value it found, none,
/// or an error —, or a release's `DELIFEQ` — 1, 0 or an error — and its `PUBLISH` — the
/// receivers, or an error (an ACL).
fn native_item() -> impl Strategy<Value = Vec<Value>> {
    let found = prop_oneof![
        "[!-~]{1,24} [a-z0-9-]{1,12} [0-9]{1,16}".prop_map(|v| Value::BulkString(v.into_bytes())),
        Just(Value::Nil),
        Just(error()),
    ];
    let deleted = prop_oneof![Just(Value::Int(1)), Just(Value::Int(0)), Just(error())];
    let published = prop_oneof![(0..1_000i64).prop_map(Value::Int), Just(error())];
    prop_oneof![
        found.prop_map(|v| vec![v]),
        (deleted, published).prop_map(|(d, p)| vec![d, p]),
    ]
}

/// A native call's whole reply (`batch::native_pipeline`): each item's replies, each after
/// `ASKING`'s `OK` when `asking`, then `PING id`'s; with the widths the call was sent with
/// and each item's first reply, which the decoder must hand back.
type NativeCall = (Vec<Value>, u64, Vec<usize>, bool, Vec<Value>);

fn native_call() -> impl Strategy<Value = NativeCall> {
    (vec(native_item(), 1..9), any::<u64>(), any::<bool>()).prop_map(|(items, id, asking)| {
        let widths = items.iter().map(Vec::len).collect();
        let firsts = items.iter().filter_map(|i| i.first().cloned()).collect();
        let mut values = Vec::new();
        for item in items {
            if asking {
                values.push(Value::Okay);
            }
            values.extend(item);
        }
        values.push(Value::BulkString(id.to_string().into_bytes()));
        (values, id, widths, asking, firsts)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// A native call's reply decodes to each item's first reply, in order; the same reply
    /// with one value fewer, or ending with another call's id, is an error (one case in
    /// eight each; the other six decode).
    #[test]
    fn native_replies_decode_to_each_items_first_reply(
        (mut values, id, widths, asking, firsts) in native_call(),
        damage in 0..8u8,
    ) {
        match damage {
            0 => {
                values.remove(0);
                prop_assert!(native(values, id, &widths, asking).is_err());
            }
            1 => {
                let other = id.wrapping_add(1);
                prop_assert!(native(values, other, &widths, asking).is_err());
            }
            _ => prop_assert_eq!(native(values, id, &widths, asking), Ok(firsts)),
        }
    }
}
