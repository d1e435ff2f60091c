//! The replay that judges a run: `attempted` against `accepted`, as the target recorded
//! them. The replay is a pure function of the two lists, so its own test can feed it
//! histories (an unfenced one) that a real run must never produce.

use crate::common::RedisServer;

#[derive(Debug, Default)]
pub struct History {
    /// Attempted writes whose token was not above the maximum accepted before them: the
    /// fence refused them.
    pub stale_rejected: usize,
    /// Of those, the ones below the maximum: a stale holder's write that an unfenced target
    /// (last write wins) would have taken, overwriting a newer holder's effect.
    pub would_have_landed: usize,
    /// Attempts with exactly the maximum token (the same token written twice).
    pub duplicates: usize,
    pub violations: Vec<String>,
}

pub fn check_history(attempted: &[u64], accepted: &[u64]) -> History {
    let mut h = History::default();
    for pair in accepted.windows(2) {
        if pair[1] <= pair[0] {
            h.violations.push(format!(
                "accepted tokens do not strictly increase: {} then {}",
                pair[0], pair[1]
            ));
        }
    }
    let mut max_so_far = 0u64;
    let mut next = 0usize;
    for (i, &t) in attempted.iter().enumerate() {
        if t > max_so_far {
            match accepted.get(next) {
                Some(&a) if a == t => {}
                Some(&a) => h.violations.push(format!(
                    "attempt #{i} (token {t}, above max {max_so_far}) should be accepted \
                     #{next}, which is {a}"
                )),
                None => h.violations.push(format!(
                    "attempt #{i} (token {t}, above max {max_so_far}) is missing from accepted"
                )),
            }
            next += 1;
            max_so_far = t;
        } else {
            h.stale_rejected += 1;
            if t < max_so_far {
                h.would_have_landed += 1;
            } else {
                h.duplicates += 1;
            }
        }
    }
    if next != accepted.len() {
        h.violations.push(format!(
            "accepted has {} tokens, the replay of attempted explains {next}",
            accepted.len()
        ));
    }
    h
}

pub fn read_tokens(server: &RedisServer, key: &str) -> (Vec<u64>, Vec<String>) {
    let raw: Vec<String> = server.query(&["LRANGE", key, "0", "-1"]);
    let mut tokens = Vec::with_capacity(raw.len());
    let mut bad = Vec::new();
    for r in raw {
        match r.parse::<u64>() {
            Ok(t) => tokens.push(t),
            Err(_) => bad.push(format!("{key} holds a non-token {r:?}")),
        }
    }
    (tokens, bad)
}
