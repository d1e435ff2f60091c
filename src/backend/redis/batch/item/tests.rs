use super::*;
use crate::protocol::{FencingToken, Namespace, Purpose, ResourceDigest};
use crate::{Attempt, OperationId, OwnerToken};

fn renewal() -> (Item, String) {
    let owner = OwnerToken::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
    let attempt = Attempt::from_parts(owner, OperationId::new("op-1").unwrap());
    let request =
        LeaseRequest::builder(Purpose::new("p").unwrap(), ResourceDigest::of("r"), attempt)
            .build()
            .unwrap();
    let keys = LeaseKeys::new(&Namespace::default(), request.purpose(), request.resource());
    let holding = Holding::acquired(&request, FencingToken::new(42));
    let value = holding.value().unwrap().to_string();
    (Item::renew(&keys, &holding, Duration::from_secs(30)), value)
}

/// A renewal and a release of a held lease send its key and its `"<owner> <op> "` as
/// parts of what the lease keeps; the bytes must be those an item that copies them sends,
/// with and without a holder label and a lock-delay.
#[test]
fn a_held_leases_item_sends_what_a_copied_one_does() {
    let owner = OwnerToken::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
    for (label, delay) in [(None, None), (Some("web-7"), Some(2)), (Some("w"), None)] {
        let attempt = Attempt::from_parts(owner.clone(), OperationId::new("op-1").unwrap());
        let mut builder = LeaseRequest::builder(
            Purpose::new("p").unwrap(),
            ResourceDigest::of("r"),
            attempt.clone(),
        );
        if let Some(label) = label {
            builder = builder.holder(crate::protocol::HolderLabel::new(label).unwrap());
        }
        if let Some(delay) = delay {
            builder = builder.lock_delay(Duration::from_secs(delay));
        }
        let request = builder.build().unwrap();
        let keys = LeaseKeys::new(&Namespace::default(), request.purpose(), request.resource());
        let held = Holding::acquired(&request, FencingToken::new(42));
        let copied = Holding::of_attempt(attempt);
        let ttl = Duration::from_millis(30_123);
        let packed = |item: Item| command(7, &[&item]).get_packed_command();
        assert!(matches!(
            Item::renew(&keys, &held, ttl).mine,
            Text::Part { .. }
        ));
        assert!(matches!(
            Item::renew(&keys, &held, ttl).lease,
            Text::Part { .. }
        ));
        assert_eq!(
            packed(Item::renew(&keys, &held, ttl)),
            packed(Item::renew(&keys, &copied, ttl)),
            "renewal, label {label:?}, delay {delay:?}"
        );
        assert_eq!(
            packed(Item::release(&keys, &held)),
            packed(Item::release(&keys, &copied)),
            "release, label {label:?}, delay {delay:?}"
        );
        let head = String::from_utf8(packed(Item::renew(&keys, &held, ttl))).unwrap();
        assert!(head.contains("\r\nN30123\r\n"), "{head}");
        assert!(
            head.contains("\r\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA op-1 \r\n"),
            "{head}"
        );
    }
}

fn status(reply: NativeReply) -> Option<Value> {
    match reply {
        NativeReply::Reply(value) => Some(value),
        NativeReply::Script => None,
    }
}

#[test]
fn a_native_renewal_answers_in_the_scripts_words() {
    let (item, value) = renewal();
    let word = |w: &str| Some(Value::SimpleString(w.to_owned()));
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let mine = format!("{} ", value.rsplit_once(' ').unwrap().0);
    let error = redis::parse_redis_value(b"-WRONGTYPE not a string\r\n").unwrap();
    let rows = [
        (bulk(&value), word("RENEWED")),
        (Value::Nil, word("ABSENT")),
        (bulk("someone else 7"), word("NOT_OWNER")),
        (bulk(&format!("{value} d1000")), None),
        (bulk(&format!("{mine}web-1 42")), None),
        (Value::Int(1), Some(Value::Int(1))),
    ];
    for (reply, expected) in rows {
        assert_eq!(
            status(item.native_reply(reply.clone())),
            expected,
            "{reply:?}"
        );
    }
    assert!(matches!(
        item.native_reply(error),
        NativeReply::Reply(Value::ServerError(_))
    ));
}

#[test]
fn a_native_release_is_released_or_left_to_the_script() {
    let (renewal, _) = renewal();
    let release = Item {
        kind: Kind::Release,
        ..renewal
    };
    assert!(matches!(
        release.native_reply(Value::Int(1)),
        NativeReply::Reply(Value::SimpleString(w)) if w == "RELEASED"
    ));
    assert!(matches!(
        release.native_reply(Value::Int(0)),
        NativeReply::Script
    ));
    assert!(matches!(
        release.native_reply(Value::Nil),
        NativeReply::Reply(Value::Nil)
    ));
}

#[test]
fn only_an_operation_whose_value_is_known_goes_native_and_only_where_the_server_can() {
    let (renewal, _) = renewal();
    let release = Item {
        kind: Kind::Release,
        ..renewal.clone()
    };
    let info = |v: &str| format!("server_name:valkey\nvalkey_version:{v}");
    let valkey_9 = ServerCapabilities::from_info(&info("9.1.2"));
    let valkey_8_1 = ServerCapabilities::from_info(&info("8.1.0"));
    assert!(renewal.native(valkey_9) && renewal.native(valkey_8_1));
    assert!(release.native(valkey_9) && !release.native(valkey_8_1));
    for item in [&renewal, &release] {
        assert!(!item.native(ServerCapabilities::SCRIPTS_ONLY));
        assert!(!item.scripted().native(valkey_9));
    }
    assert_eq!(
        (renewal.native_commands(), release.native_commands()),
        (1, 2)
    );
}
