//! Property tests of everything that parses outside input through the public API: duration
//! text, digests, purposes, namespaces, operation ids and request bounds. None may panic;
//! what they accept must satisfy the documented rule; what they print must parse back.

use std::time::Duration;

use leasehold::protocol::limits::{TTL, WAIT_TIMEOUT};
use leasehold::*;
use proptest::prelude::*;

fn word_ok(s: &str, extra: &[char]) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.len() <= 64 && plain(first) && chars.all(|c| plain(c) || extra.contains(&c))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn duration_text_never_panics_and_accepted_values_are_in_bounds(text in "\\PC{0,24}") {
        for bounds in [TTL, WAIT_TIMEOUT] {
            if let Ok(d) = bounds.parse(&text) {
                prop_assert!(d >= bounds.min && d <= bounds.max);
            }
        }
    }

    #[test]
    fn humantime_like_text_parses_to_what_it_says(n in 1u64..3_600, unit in prop_oneof!["ms", "s", "m"]) {
        let text = format!("{n}{unit}");
        let expected = match unit.as_str() {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            _ => Duration::from_secs(n * 60),
        };
        match TTL.parse(&text) {
            Ok(d) => prop_assert_eq!(d, expected),
            Err(LeaseError::InvalidDuration { param: "ttl", .. }) => {
                prop_assert!(expected < TTL.min || expected > TTL.max);
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    #[test]
    fn digest_parse_never_panics_and_display_round_trips(text in "\\PC{0,80}", id in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(d) = ResourceDigest::parse(&text) {
            prop_assert_eq!(d.to_string(), text);
        }
        let d = ResourceDigest::of(&id);
        prop_assert_eq!(ResourceDigest::parse(&d.to_string()), Ok(d));
        // The hex-looking form with one character changed to uppercase is rejected.
        let upper = d.to_string().replacen(|c: char| c.is_ascii_lowercase() && c != 's' && c != 'h', "A", 1);
        if upper != d.to_string() && !upper.starts_with("sha256:") {
            prop_assert!(ResourceDigest::parse(&upper).is_err());
        }
    }

    #[test]
    fn digest_hex_forms_are_accepted_exactly(bytes in proptest::array::uniform32(any::<u8>())) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let d = ResourceDigest::parse(&format!("sha256:{hex}")).unwrap();
        prop_assert_eq!(d.as_bytes(), &bytes);
        prop_assert_eq!(d.short(), &hex[..12]);
    }

    #[test]
    fn purposes_and_namespaces_accept_exactly_their_pattern(text in "[a-zA-Z0-9._:{} -]{0,70}") {
        prop_assert_eq!(Purpose::new(&text).is_ok(), word_ok(&text, &['.', '_', '-']));
        prop_assert_eq!(Namespace::new(&text).is_ok(), word_ok(&text, &['.', '_', '-', ':']));
        if let Ok(p) = Purpose::new(&text) {
            prop_assert_eq!(p.as_str(), text.as_str());
        }
    }

    #[test]
    fn operation_ids_accept_printable_ascii_without_spaces_up_to_128_bytes(text in "\\PC{0,140}") {
        let ok = !text.is_empty() && text.len() <= 128 && text.bytes().all(|b| b.is_ascii_graphic());
        prop_assert_eq!(OperationId::new(&text).is_ok(), ok);
    }

    #[test]
    fn requests_check_their_bounds(ttl_ms in 0u64..4_000_000, wait_ms in 0u64..4_000_000) {
        let attempt = Attempt::new(OperationId::new("op").unwrap()).unwrap();
        let built = LeaseRequest::builder(Purpose::new("p").unwrap(), ResourceDigest::of(b"r"), attempt)
            .ttl(Duration::from_millis(ttl_ms))
            .wait_timeout(Duration::from_millis(wait_ms))
            .build();
        let ttl_ok = (100..=3_600_000).contains(&ttl_ms);
        let wait_ok = wait_ms <= 3_600_000;
        prop_assert_eq!(built.is_ok(), ttl_ok && wait_ok);
    }
}
