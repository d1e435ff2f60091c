//! The batch script's plain path (`lua/plain.lua`) hands a call to the general path
//! (`lua/batch.lua`) at its first item that is not simple: what either path wrote, the
//! other reads, and tokens keep increasing across them. (An item that raises in the plain
//! path: `batching`'s `one_items_error_is_its_own`, a call of plain acquisitions.)

use crate::common::RedisServer;
use crate::common::leases::{batch_lines, batch_script};

const FENCE: &str = "t:{g}:fence";

/// Runs the batch script on `items` (head, "<owner> <op> ", keys); returns each item's
/// reply as text, the call's id left out.
fn run(server: &RedisServer, items: &[(&str, &str, &[&str])]) -> Vec<String> {
    let script = batch_script();
    let keys: Vec<&str> = items
        .iter()
        .flat_map(|(_, _, k)| k.iter().copied())
        .collect();
    let count = keys.len().to_string();
    let mut args = vec!["EVAL", script.as_str(), count.as_str()];
    args.extend(keys);
    args.push("9");
    for (head, mine, _) in items {
        args.push(head);
        args.push(mine);
    }
    batch_lines(server.cmd(&args)).split_off(1)
}

/// The token an `ACQUIRED <ttl> <token>` reply carries.
fn token(reply: &str) -> u64 {
    assert!(reply.starts_with("ACQUIRED 30000 "), "{reply}");
    reply.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_call_goes_on_in_the_general_path_from_its_first_item_that_is_not_simple() {
    let server = RedisServer::start();
    let k1: &[&str] = &["t:{g}:k1", FENCE, "t:{g}:k1:line"];
    let k2: &[&str] = &["t:{g}:k2", FENCE, "t:{g}:k2:line"];
    let replies = run(
        &server,
        &[
            ("A30000 -00000000000000a1", "o1 op ", k1),
            // Held by the item before: the plain path stops here.
            ("A30000 -00000000000000a2", "o2 op ", k1),
            ("A30000 -00000000000000a3", "o3 op ", k2),
            ("R", "o1 op ", &k1[..1]),
            ("A30000 -00000000000000a2", "o2 op ", k1),
            ("N30000", "o2 op ", &k1[..1]),
            ("R", "o2 op ", &k1[..1]),
        ],
    );
    assert_eq!(replies.len(), 7, "{replies:?}");
    assert!(replies[1].starts_with("CONTENDED "), "{replies:?}");
    assert_eq!(replies[3], "RELEASED", "{replies:?}");
    assert_eq!(replies[5..], ["RENEWED", "RELEASED"], "{replies:?}");
    let (t1, t2, t3) = (token(&replies[0]), token(&replies[2]), token(&replies[4]));
    assert!(t1 < t2 && t2 < t3, "{replies:?}");
    assert_eq!(server.query::<i64>(&["EXISTS", "t:{g}:k1"]), 0);

    // A waiting acquisition in line already ('=') goes to the general path, which reads
    // the (absent) line; the plain items after it see what it wrote.
    let replies = run(
        &server,
        &[
            ("A30000 =00000000000000a5", "o5 op ", k1),
            ("A30000 -00000000000000a6", "o6 op ", k1),
            ("N30000", "o5 op ", &k1[..1]),
            ("R", "o5 op ", &k1[..1]),
        ],
    );
    assert!(token(&replies[0]) > t3, "{replies:?}");
    assert!(replies[1].starts_with("CONTENDED "), "{replies:?}");
    assert_eq!(replies[2..], ["RENEWED", "RELEASED"], "{replies:?}");
}

/// A free lease whose line holds a live waiter is not taken by a try, though every item of
/// the call is plain.
#[test]
fn a_plain_try_does_not_take_a_free_lease_from_a_waiter_in_line() {
    let server = RedisServer::start();
    let time: Vec<String> = server.query(&["TIME"]);
    let now = format!("{}{:06}", time[0], time[1].parse::<u64>().unwrap());
    let waiter = "00000000000000b100000000000000b1";
    server.cmd(&["ZADD", "t:{g}:k1:line", &now, waiter]);
    let k1: &[&str] = &["t:{g}:k1", FENCE, "t:{g}:k1:line"];
    let k2: &[&str] = &["t:{g}:k2", FENCE, "t:{g}:k2:line"];
    let replies = run(
        &server,
        &[
            ("A30000 -00000000000000a2", "o2 op ", k2),
            ("A30000 -00000000000000a1", "o1 op ", k1),
            ("A30000 -00000000000000a3", "o3 op ", k2),
        ],
    );
    token(&replies[0]);
    assert_eq!(replies[1], "CONTENDED 0", "{replies:?}");
    assert!(replies[2].starts_with("CONTENDED "), "{replies:?}");
    assert_eq!(server.query::<i64>(&["EXISTS", "t:{g}:k1"]), 0);
}
