//! `Purpose` and `Namespace`: the two caller-chosen words in a lease key.
//!
//! Both are restricted to characters that cannot break the key layout: no braces (the Redis
//! Cluster hash tag), no whitespace, no `:` inside a purpose (the key separator).

use std::fmt;
use std::sync::Arc;

use crate::error::{LeaseError, excerpt};
use crate::protocol::limits::{NAMESPACE_MAX_LEN, PURPOSE_MAX_LEN};

/// What a lease is for, e.g. `"billing.nightly"`: `[a-z0-9][a-z0-9._-]{0,63}`.
///
/// One resource can carry independent leases for different purposes.
///
/// ```
/// use leasehold::Purpose;
/// assert!(Purpose::new("reports.daily").is_ok());
/// assert!(Purpose::new("Reports").is_err()); // lowercase only
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Purpose(Arc<str>);

impl Purpose {
    /// Validates `text`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidPurpose`] naming the rule it broke.
    pub fn new(text: &str) -> Result<Self, LeaseError> {
        check_word(text, PURPOSE_MAX_LEN, |c| matches!(c, '.' | '_' | '-'))
            .map(|()| Self(Arc::from(text)))
            .map_err(|rule| LeaseError::InvalidPurpose {
                value: excerpt(text),
                rule,
            })
    }

    /// The validated text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, shared: what every metric label and handle of this purpose points to, so
    /// labelling a sample costs no allocation.
    pub(crate) fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }
}

/// Isolates tenants or applications sharing one Redis: `[a-z0-9][a-z0-9._:-]{0,63}`.
///
/// Default `leasehold`. Every key leasehold writes starts with it, so an ACL rule such as
/// `~leasehold:*` can confine a client to its namespace.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

impl Namespace {
    /// The namespace used when none is configured.
    pub const DEFAULT: &'static str = "leasehold";

    /// Validates `text`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidNamespace`] naming the rule it broke.
    pub fn new(text: &str) -> Result<Self, LeaseError> {
        check_word(text, NAMESPACE_MAX_LEN, |c| {
            matches!(c, '.' | '_' | '-' | ':')
        })
        .map(|()| Self(text.to_owned()))
        .map_err(|rule| LeaseError::InvalidNamespace {
            value: excerpt(text),
            rule,
        })
    }

    /// The validated text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

fn check_word(
    text: &str,
    max_len: usize,
    extra: impl Fn(char) -> bool,
) -> Result<(), &'static str> {
    let mut chars = text.chars();
    let first = chars.next().ok_or("must not be empty")?;
    if text.len() > max_len {
        // Both words share one maximum, so the rule text can be static.
        const _: () = assert!(PURPOSE_MAX_LEN == 64 && NAMESPACE_MAX_LEN == 64);
        return Err("must be at most 64 bytes");
    }
    let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !plain(first) {
        return Err("must start with a lowercase letter or digit");
    }
    if !chars.all(|c| plain(c) || extra(c)) {
        return Err("may contain only lowercase letters, digits and the listed punctuation");
    }
    Ok(())
}

macro_rules! word_traits {
    ($ty:ident) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($ty), self.0)
            }
        }
        impl std::str::FromStr for $ty {
            type Err = LeaseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }
        impl TryFrom<String> for $ty {
            type Error = LeaseError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::new(&s)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}
word_traits!(Purpose);
word_traits!(Namespace);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purpose_pattern_is_enforced() {
        for ok in ["a", "0", "billing.nightly", "a_b-c.d", &"a".repeat(64)] {
            assert!(Purpose::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "A",
            "a b",
            "a:b",
            "a{b}",
            &"a".repeat(65),
            "é",
        ] {
            assert!(
                matches!(Purpose::new(bad), Err(LeaseError::InvalidPurpose { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn namespace_allows_colons_but_not_braces() {
        assert!(Namespace::new("tenant:a").is_ok());
        assert!(Namespace::new("tenant{a}").is_err());
        assert_eq!(Namespace::default().as_str(), "leasehold");
    }

    #[test]
    fn empty_purpose_error_text() {
        assert_eq!(
            Purpose::new("").unwrap_err().to_string(),
            "purpose \"\" is invalid: must not be empty"
        );
    }
}
