//! `HolderLabel`: who holds a lease, in words an operator reads.

use std::fmt;
use std::sync::Arc;

use crate::error::{LeaseError, excerpt};
use crate::protocol::limits::HOLDER_MAX_LEN;

/// A public label for whoever holds a lease — a hostname, a pod, `host:pid` — stored with
/// the lease and shown by `inspect` and `observe`, like a Kubernetes Lease's
/// `holderIdentity`: 1 ..= 64 bytes of printable ASCII, no spaces.
///
/// It is public: anyone who can read the lease key reads it. Never put a secret in it — the
/// owner token, a password — nor a raw resource id (leasehold keeps those out of Redis).
/// It identifies, it does not authorise: only the owner token can renew or release.
///
/// ```
/// use leasehold::HolderLabel;
/// assert!(HolderLabel::new("web-7.eu:4242").is_ok());
/// assert!(HolderLabel::new("web 7").is_err()); // no spaces
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderLabel(Arc<str>);

impl HolderLabel {
    /// Validates `text`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidHolder`] naming the rule it broke.
    pub fn new(text: &str) -> Result<Self, LeaseError> {
        let rule = if text.is_empty() {
            "must not be empty"
        } else if text.len() > HOLDER_MAX_LEN {
            "must be at most 64 bytes"
        } else if !text.bytes().all(|b| b.is_ascii_graphic()) {
            "may contain only printable ASCII without spaces"
        } else {
            return Ok(Self(Arc::from(text)));
        };
        Err(LeaseError::InvalidHolder {
            value: excerpt(text),
            rule,
        })
    }

    /// The validated text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for HolderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderLabel({:?})", &*self.0)
    }
}

impl std::str::FromStr for HolderLabel {
    type Err = LeaseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_one_printable_word_of_at_most_64_bytes() {
        let rows: &[(&str, Option<&str>)] = &[
            ("web-7", None),
            ("pod/ns/name:4242", None),
            (&"x".repeat(64), None),
            ("", Some("must not be empty")),
            (&"x".repeat(65), Some("must be at most 64 bytes")),
            (
                "web 7",
                Some("may contain only printable ASCII without spaces"),
            ),
            (
                "web\t7",
                Some("may contain only printable ASCII without spaces"),
            ),
            (
                "wéb",
                Some("may contain only printable ASCII without spaces"),
            ),
        ];
        for &(text, rule) in rows {
            match (HolderLabel::new(text), rule) {
                (Ok(label), None) => assert_eq!(label.as_str(), text),
                (Err(LeaseError::InvalidHolder { rule: got, .. }), Some(want)) => {
                    assert_eq!(got, want, "{text:?}");
                }
                (other, _) => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
