use super::*;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn a_native_call_answers_each_items_first_reply_and_ends_with_its_id() {
    let ok = || Value::Okay;
    let (a, b, published) = (bulk("a"), Value::Int(1), Value::Int(0));
    let replies = vec![a.clone(), b.clone(), published.clone(), bulk("41")];
    assert_eq!(
        native(replies, 41, &[1, 2], false),
        Ok(vec![a.clone(), b.clone()])
    );
    // After ASKING, each item's replies follow that of its ASKING.
    let replies = vec![
        ok(),
        a.clone(),
        ok(),
        b.clone(),
        published.clone(),
        bulk("7"),
    ];
    assert_eq!(
        native(replies, 7, &[1, 2], true),
        Ok(vec![a.clone(), b.clone()])
    );
    let rows = [
        vec![a.clone(), b.clone(), bulk("40")],
        vec![a.clone(), bulk("41")],
        vec![a.clone(), b.clone(), Value::Int(41)],
        vec![a.clone(), b.clone(), published.clone(), bulk("41")],
        vec![],
    ];
    for values in rows {
        assert!(
            native(values.clone(), 41, &[1, 1], false).is_err(),
            "{values:?}"
        );
    }
}

#[test]
fn acquire_replies_decode() {
    assert_eq!(
        acquire(bulk("ACQUIRED 30000 7")),
        Ok(AcquireReply::Acquired {
            ttl: Duration::from_secs(30),
            token: FencingToken::new(7),
            slot: 0,
        })
    );
    assert_eq!(
        acquire(bulk("REPLAYED 1200 8 3")),
        Ok(AcquireReply::Replayed {
            pttl: Duration::from_millis(1200),
            token: FencingToken::new(8),
            slot: 3,
        })
    );
    assert!(acquire(bulk("ACQUIRED 30000 7 -1")).is_err());
    assert!(acquire(bulk("ACQUIRED 30000 7 1 2")).is_err());
    assert_eq!(
        acquire(bulk("CONTENDED -1")),
        Ok(AcquireReply::Contended {
            pttl: Duration::ZERO,
            rank: None,
        })
    );
    assert_eq!(
        acquire(bulk("CONTENDED 0 3")),
        Ok(AcquireReply::Contended {
            pttl: Duration::ZERO,
            rank: Some(3),
        })
    );
    assert!(acquire(bulk("CONTENDED 0 -1")).is_err());
    assert!(acquire(bulk("CONTENDED 0 1 2")).is_err());
    let read = |reply, waiting| Ok(Inspected { reply, waiting });
    assert_eq!(
        inspect(bulk("HELD_BY_OTHER 12 1500 9")),
        read(
            InspectReply::HeldByOther {
                pttl: Duration::from_millis(1500),
                token: FencingToken::new(9),
                holder: None,
            },
            Some(12)
        )
    );
    assert_eq!(
        inspect(bulk("HELD_BY_ATTEMPT - 1500 9 web-7:42")),
        read(
            InspectReply::HeldByAttempt {
                pttl: Duration::from_millis(1500),
                token: FencingToken::new(9),
                holder: Some(HolderLabel::new("web-7:42").unwrap()),
            },
            None
        )
    );
    assert_eq!(
        inspect(bulk("ABSENT 0")),
        read(InspectReply::Absent, Some(0))
    );
    assert_eq!(inspect(bulk("ABSENT -")), read(InspectReply::Absent, None));
    // The line's length is always there, never negative; nothing follows an absence.
    for bad in [
        "ABSENT",
        "ABSENT -1",
        "ABSENT x",
        "ABSENT 0 1",
        "HELD_BY_OTHER 1500 9",
    ] {
        assert!(inspect(bulk(bad)).is_err(), "{bad}");
    }
    let too_long = format!("HELD_BY_OTHER 0 1500 9 {}", "x".repeat(65));
    assert!(
        inspect(bulk(&too_long))
            .unwrap_err()
            .contains("not a label")
    );
    assert_eq!(
        acquire(bulk("DELAYED 1999")),
        Ok(AcquireReply::Delayed {
            pttl: Duration::from_millis(1999),
            rank: None,
        })
    );
    assert_eq!(
        inspect(bulk("DELAYED 3 1999 9 web-7")),
        read(
            InspectReply::Delayed {
                pttl: Duration::from_millis(1999),
                token: FencingToken::new(9),
                holder: Some(HolderLabel::new("web-7").unwrap()),
            },
            Some(3)
        )
    );
    assert_eq!(release(bulk("NOT_OWNER")), Ok(ReleaseReply::NotOwner));
}

#[test]
fn a_batch_reply_is_one_value_per_item_after_the_echoed_call_id() {
    let err = redis::parse_redis_value(b"-WRONGTYPE not a lease\r\n").unwrap();
    assert!(matches!(err, Value::ServerError(_)));
    let reply = bulk("41\nRENEWED\n-WRONGTYPE not a lease");
    let items = batch(reply.clone(), 41, 2).unwrap();
    assert_eq!(items[1], err, "an item's error is passed on, for that item");
    assert_eq!(renew(items[0].clone()), Ok(RenewReply::Renewed));
    // Another call's reply (the stream lost bytes), or a count that does not match.
    assert!(
        batch(reply.clone(), 42, 2)
            .unwrap_err()
            .contains("another call")
    );
    assert!(batch(reply.clone(), 41, 3).is_err());
    assert!(batch(reply, 41, 1).is_err());
    assert!(batch(bulk("41"), 41, 0).unwrap().is_empty());
    assert!(batch(bulk("41\n"), 41, 0).is_err());
    assert!(batch(Value::Array(vec![bulk("41")]), 41, 0).is_err());
    assert!(batch(Value::Nil, 41, 0).is_err());
}

#[test]
fn malformed_replies_are_errors_not_panics() {
    for v in [
        Value::Nil,
        Value::Int(1),
        Value::Array(vec![]),
        Value::Array(vec![bulk("ACQUIRED"), Value::Int(1), Value::Int(1)]),
        bulk(""),
        bulk(" ACQUIRED 1 1"),
        bulk("ACQUIRED"),
        bulk("ACQUIRED x 1"),
        bulk("ACQUIRED 1 0"),
        bulk("ACQUIRED 1 -3"),
        bulk("ACQUIRED 1 1 1 1"),
        bulk("ACQUIRED 1 1 70000"),
        bulk("ACQUIRED  1 1"),
        bulk("ACQUIRED 1 99999999999999999999"),
        bulk("WHAT 1"),
        bulk("RENEWED 1"),
    ] {
        assert!(acquire(v.clone()).is_err(), "{v:?}");
        assert!(inspect(v.clone()).is_err(), "{v:?}");
        assert!(renew(v.clone()).is_err(), "{v:?}");
        assert!(release(v.clone()).is_err(), "{v:?}");
    }
}
