//! The bodies of leasehold's fuzz targets, one function per target in `fuzz/fuzz_targets/`.
//!
//! Each takes raw bytes and must not panic on any input; where a documented rule is cheap
//! to check, it asserts it (accepted values are in bounds, what prints parses back, errors
//! name what they reject and echo no secret), so a broken rule is a crash too.
//!
//! This file has the bodies that read a caller's text (durations, names, settings, Redis
//! URLs) and what they share; `replies` the one that reads what Redis sends back.
//!
//! `tests/fuzz_corpus.rs` runs the committed seed corpus (`fuzz/corpus/<target>/`) through
//! these same functions on the stable toolchain; this file is a module of that test, so
//! it uses nothing the main crate's tests lack (leasehold, redis, humantime).

use std::collections::BTreeMap;

use leasehold::protocol::limits::{self, DurationBounds};
use leasehold::{
    DurationProblem, LeaseError, LeaseKeys, LeaseSettings, Namespace, OperationId, Purpose,
    RedisBackend, RedisConfig, ResourceDigest,
};

mod replies;

pub use replies::script_reply;

/// Every bounds table a caller's text can reach.
const BOUNDS: [DurationBounds; 7] = [
    limits::TTL,
    limits::WAIT_TIMEOUT,
    limits::COMMAND_TIMEOUT,
    limits::CONNECT_TIMEOUT,
    limits::DRIFT_BUDGET,
    limits::RETRY_AFTER_FALLBACK,
    limits::REPLICA_WAIT,
];

/// A table that bounds nothing: its `parse` is humantime's reading alone, what every
/// table's `parse` starts from.
const UNBOUNDED: DurationBounds = DurationBounds {
    param: "fuzzed",
    min: std::time::Duration::ZERO,
    max: std::time::Duration::MAX,
};

/// Longest excerpt of rejected text an error carries, in characters.
const EXCERPT_CHARS: usize = 80;

/// Duration text: the unbounded reading and every bounds table's `parse`.
///
/// Rules: a table accepts exactly the values the unbounded reading gives that lie in its bounds;
/// an accepted value, printed as humantime, parses back to itself; a rejection names the
/// table's parameter and, for unreadable text, carries at most an 80-character prefix of it.
pub fn durations(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let raw = UNBOUNDED.parse(text);
    if let Err(e) = &raw {
        assert_not_a_duration(e, "fuzzed", text);
    }
    for bounds in BOUNDS {
        let parsed = bounds.parse(text);
        match (&raw, &parsed) {
            (Ok(read), Ok(accepted)) => {
                assert_eq!(read, accepted, "{}: {text:?}", bounds.param);
                assert!(
                    (bounds.min..=bounds.max).contains(accepted),
                    "{} accepted {accepted:?} from {text:?}",
                    bounds.param
                );
                let printed = humantime::format_duration(*accepted).to_string();
                assert_eq!(
                    bounds.parse(&printed).ok(),
                    Some(*accepted),
                    "{}: {printed:?} does not parse back",
                    bounds.param
                );
            }
            (Ok(read), Err(e)) => {
                assert!(
                    !(bounds.min..=bounds.max).contains(read),
                    "{} refused {read:?}, which is in bounds: {e}",
                    bounds.param
                );
                let LeaseError::InvalidDuration { param, problem } = e else {
                    panic!("{}: unexpected error {e:?}", bounds.param);
                };
                assert_eq!(*param, bounds.param);
                assert!(
                    matches!(
                        problem,
                        DurationProblem::BelowMinimum { value, min }
                            if value == read && *min == bounds.min
                    ) || matches!(
                        problem,
                        DurationProblem::AboveMaximum { value, max }
                            if value == read && *max == bounds.max
                    ),
                    "{}: {problem:?} for {read:?}",
                    bounds.param
                );
            }
            (Err(_), Ok(accepted)) => {
                panic!(
                    "{} accepted {accepted:?} from unreadable {text:?}",
                    bounds.param
                )
            }
            (Err(_), Err(e)) => assert_not_a_duration(e, bounds.param, text),
        }
        if let Err(e) = &parsed {
            let _ = e.to_string();
        }
    }
}

fn assert_not_a_duration(e: &LeaseError, expected: &str, text: &str) {
    let LeaseError::InvalidDuration {
        param,
        problem: DurationProblem::NotADuration { text: excerpt, .. },
    } = e
    else {
        panic!("{expected}: unexpected error {e:?} for {text:?}");
    };
    assert_eq!(*param, expected);
    assert_excerpt(excerpt, text);
    let _ = e.to_string();
}

/// An error's copy of rejected text: a prefix of it, at most 80 characters.
fn assert_excerpt(excerpt: &str, text: &str) {
    assert!(
        text.starts_with(excerpt),
        "{excerpt:?} is not from {text:?}"
    );
    assert_eq!(
        excerpt.chars().count(),
        text.chars().count().min(EXCERPT_CHARS),
        "excerpt of {text:?}"
    );
}

/// The caller-chosen words and digests: `ResourceDigest::parse`, `Purpose::new`,
/// `Namespace::new`, `OperationId::new` on the whole text and, if it has several lines,
/// on each line; then the lease keys of what was accepted.
///
/// Rules: each accepts exactly its documented pattern and keeps the text as given; a digest
/// prints as the text it was read from; every raw id's digest parses back; the keys of any
/// accepted namespace and purpose carry exactly one hash tag, the digest's group.
pub fn names(data: &[u8]) {
    // Any bytes are a raw resource id.
    let digest = ResourceDigest::of(data);
    assert_eq!(ResourceDigest::parse(&digest.to_string()), Ok(digest));

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = if text.contains('\n') {
        text.split('\n').collect()
    } else {
        Vec::new()
    };
    let mut words = Vec::new();
    for piece in std::iter::once(text).chain(lines.iter().copied()) {
        words.push(word(piece));
    }
    // The whole text as namespace and purpose of its own digest; then the first line as a
    // namespace, the second as a purpose, the third as a digest (or the raw id's).
    let whole = &words[0];
    let namespace = words.get(1).and_then(|w| w.namespace.clone());
    let purpose = words.get(2).and_then(|w| w.purpose.clone());
    let resource = words.get(3).and_then(|w| w.digest).unwrap_or(digest);
    for (namespace, purpose, resource) in [
        (whole.namespace.clone(), whole.purpose.clone(), digest),
        (namespace, purpose, resource),
    ] {
        if let (Some(ns), Some(purpose)) = (namespace, purpose) {
            assert_keys(&ns, &purpose, &resource);
        }
    }
}

/// What one piece of text is accepted as.
struct Word {
    namespace: Option<Namespace>,
    purpose: Option<Purpose>,
    digest: Option<ResourceDigest>,
}

fn word(text: &str) -> Word {
    let digest = match ResourceDigest::parse(text) {
        Ok(d) => {
            assert_eq!(d.to_string(), text);
            assert_eq!(text.parse::<ResourceDigest>(), Ok(d));
            assert_eq!(&text["sha256:".len()..], d.hex());
            Some(d)
        }
        // The variant carries no text, so a raw id passed by mistake is never echoed.
        Err(LeaseError::InvalidDigest { .. }) => None,
        Err(e) => panic!("digest: unexpected error {e:?}"),
    };

    let purpose_ok = is_word(text, &['.', '_', '-']);
    let purpose = match Purpose::new(text) {
        Ok(p) => {
            assert!(purpose_ok, "purpose accepted {text:?}");
            assert_eq!(p.as_str(), text);
            assert_eq!(p.to_string(), text);
            Some(p)
        }
        Err(LeaseError::InvalidPurpose { value, .. }) => {
            assert!(!purpose_ok, "purpose refused {text:?}");
            assert_excerpt(&value, text);
            None
        }
        Err(e) => panic!("purpose: unexpected error {e:?}"),
    };

    let namespace_ok = is_word(text, &['.', '_', '-', ':']);
    let namespace = match Namespace::new(text) {
        Ok(ns) => {
            assert!(namespace_ok, "namespace accepted {text:?}");
            assert_eq!(ns.as_str(), text);
            Some(ns)
        }
        Err(LeaseError::InvalidNamespace { value, .. }) => {
            assert!(!namespace_ok, "namespace refused {text:?}");
            assert_excerpt(&value, text);
            None
        }
        Err(e) => panic!("namespace: unexpected error {e:?}"),
    };

    let operation_ok = (1..=limits::OPERATION_ID_MAX_LEN).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_graphic());
    match OperationId::new(text) {
        Ok(op) => {
            assert!(operation_ok, "operation id accepted {text:?}");
            assert_eq!(op.as_str(), text);
        }
        Err(LeaseError::InvalidOperationId { .. }) => {
            assert!(!operation_ok, "operation id refused {text:?}");
        }
        Err(e) => panic!("operation id: unexpected error {e:?}"),
    }

    Word {
        namespace,
        purpose,
        digest,
    }
}

/// `[a-z0-9][a-z0-9<extra>]{0,63}`: the documented pattern of a purpose or namespace.
fn is_word(text: &str, extra: &[char]) -> bool {
    let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut chars = text.chars();
    text.len() <= limits::PURPOSE_MAX_LEN
        && chars.next().is_some_and(plain)
        && chars.all(|c| plain(c) || extra.contains(&c))
}

fn assert_keys(ns: &Namespace, purpose: &Purpose, resource: &ResourceDigest) {
    let keys = LeaseKeys::new(ns, purpose, resource);
    let hex = resource.hex();
    let tag = format!("{{{}}}", &hex[..4]);
    let prefix = format!("{ns}:lease:v2:{purpose}:{tag}:");
    for key in [keys.lease(), keys.fence(), keys.release_channel()] {
        // Redis Cluster hashes the first `{…}`: there must be one, and it must be the group.
        assert!(key.starts_with(&prefix), "{key}");
        assert_eq!(key.matches('{').count(), 1, "{key}");
        assert_eq!(key.matches('}').count(), 1, "{key}");
        assert!(!key.chars().any(char::is_whitespace), "{key:?}");
    }
    assert_eq!(keys.lease(), format!("{prefix}{hex}"));
}

/// `LeaseSettings::from_lookup` over `NAME=value` lines (later lines win, as in a shell).
///
/// Rules: accepted settings validate, and hold what the variables said (durations as
/// humantime reads them, trimmed); defaults where unset; a rejection names a parameter
/// whose variable was set.
pub fn settings(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let vars: BTreeMap<&str, &str> = text.split('\n').filter_map(|l| l.split_once('=')).collect();
    // A setting's variable is `LEASEHOLD_` and its name in capitals.
    let set = |field: &str| {
        vars.get(format!("LEASEHOLD_{}", field.to_ascii_uppercase()).as_str())
            .copied()
    };
    match LeaseSettings::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned())) {
        Ok(s) => {
            assert_eq!(s.validate(), Ok(()));
            let defaults = LeaseSettings::default();
            let read =
                |field: &str| set(field).and_then(|t| humantime::parse_duration(t.trim()).ok());
            assert_eq!(
                s.namespace.as_str(),
                set("namespace").unwrap_or(defaults.namespace.as_str())
            );
            for (field, value, default) in [
                (
                    "command_timeout",
                    s.command_timeout,
                    defaults.command_timeout,
                ),
                (
                    "connect_timeout",
                    s.connect_timeout,
                    defaults.connect_timeout,
                ),
                ("drift_budget", s.drift_budget, defaults.drift_budget),
                (
                    "retry_after_fallback",
                    s.retry_after_fallback,
                    defaults.retry_after_fallback,
                ),
            ] {
                assert_eq!(value, read(field).unwrap_or(default), "{field}");
            }
            assert_eq!(s.renew_every, read("renew_every"));
            assert_eq!(s.safety_margin, read("safety_margin"));
        }
        Err(e) => {
            let _ = e.to_string();
            match &e {
                LeaseError::InvalidNamespace { value, .. } => {
                    let given = set("namespace");
                    assert!(given.is_some(), "namespace refused but not set: {e}");
                    assert_excerpt(value, given.unwrap_or_default());
                }
                LeaseError::InvalidDuration { param, problem } => {
                    assert!(set(param).is_some(), "{param} refused but not set: {e}");
                    if let DurationProblem::NotADuration { text, .. } = problem {
                        assert_excerpt(text, set(param).unwrap_or_default());
                    }
                }
                other => panic!("settings: unexpected error {other:?}"),
            }
        }
    }
}

/// A password only the fuzz inputs use: no error text of leasehold or redis contains it.
const SECRET: &str = "hunter2";

/// `RedisBackend::new` on a configuration read from the text. The first line picks the
/// topology — `standalone`, `sentinel <master name>` or `cluster` — and each further line is
/// a URL, or `template <url>` for the Sentinel node URL template. Text whose first line is
/// none of these is one standalone URL as a whole.
///
/// Rules: construction does no I/O and never panics; a rejection is `InvalidRedisUrl`;
/// neither the error nor the configuration's `Debug` shows a password (checked when the
/// password `hunter2` appears in the text, and only where URLs carry passwords).
pub fn redis_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let head = lines.next().unwrap_or_default();
    let (word, rest) = head.split_once(' ').unwrap_or((head, ""));
    let mut urls = Vec::new();
    let mut template = None;
    for line in lines {
        match line.strip_prefix("template ") {
            Some(t) => template = Some(t.to_owned()),
            None => urls.push(line.to_owned()),
        }
    }
    let mut config = match word {
        "standalone" => RedisConfig::new(urls.first().cloned().unwrap_or_default()),
        "sentinel" => RedisConfig::sentinel(urls.clone(), rest),
        "cluster" => RedisConfig::cluster(urls.clone()),
        _ => {
            urls = vec![text.to_owned()];
            template = None;
            RedisConfig::new(text)
        }
    };
    if let Some(t) = &template {
        config = config.sentinel_node_url_template(t.as_str());
    }
    let debug = format!("{config:?}");
    let result = RedisBackend::new(config);
    if let Err(e) = &result {
        assert!(
            matches!(e, LeaseError::InvalidRedisUrl { .. }),
            "unexpected error {e:?}"
        );
    }
    let as_password: usize = urls
        .iter()
        .chain(template.iter())
        .flat_map(|u| password_fields(u))
        .map(|field| field.matches(SECRET).count())
        .sum();
    if as_password > 0 && as_password == text.matches(SECRET).count() {
        assert!(!debug.contains(SECRET), "Debug shows the password: {debug}");
        if let Err(e) = &result {
            let shown = format!("{e} {e:?}");
            assert!(
                !shown.contains(SECRET),
                "the error shows the password: {shown}"
            );
        }
    }
}

/// Where a URL carries a password: its user info (`user:password` before the host: the
/// authority runs from `//` to the first `/`, `?` or `#`, and the user info ends at its last
/// `@`), and the `pass` parameters of its query (`unix:///path?pass=…`).
fn password_fields(url: &str) -> Vec<&str> {
    let Some((_, after)) = url.split_once("//") else {
        return Vec::new();
    };
    let (authority, rest) =
        after.split_at(after.find(['/', '?', '#', '\\']).unwrap_or(after.len()));
    let mut fields: Vec<&str> = authority
        .rsplit_once('@')
        .map(|(info, _)| info)
        .into_iter()
        .collect();
    if let Some((_, query)) = rest.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        fields.extend(query.split('&').filter_map(|p| p.strip_prefix("pass=")));
    }
    fields
}
