//! `OwnerToken`, `OperationId` and `Attempt`: who is asking, made before the first send.
//!
//! An attempt exists before anything reaches Redis, so when a reply is lost the same attempt
//! can be sent again and Redis recognises it (REPLAYED with the original fencing token).

use std::fmt;

use base64::Engine as _;

use crate::error::LeaseError;
use crate::protocol::limits::OPERATION_ID_MAX_LEN;

/// Bytes of OS randomness in an [`OwnerToken`].
const OWNER_TOKEN_BYTES: usize = 24;

/// 24 bytes from the OS CSPRNG, base64url without padding (32 characters).
///
/// It is a bearer secret: whoever has it can renew or release the lease. `Debug` and
/// `Display` print `OwnerToken(<redacted>)`; only [`OwnerToken::expose`] gives the text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// Draws a fresh token from the operating system.
    ///
    /// # Errors
    /// [`LeaseError::EntropyUnavailable`] if the OS random source fails.
    pub fn generate() -> Result<Self, LeaseError> {
        let mut bytes = [0u8; OWNER_TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| LeaseError::EntropyUnavailable {
            reason: e.to_string(),
        })?;
        Ok(Self(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        ))
    }

    /// The token text, for the backend that sends it — and for a caller that persists an
    /// attempt across a restart (read it back with [`parse`](Self::parse)). Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A token from its text, as [`expose`](Self::expose) gave it: 32 base64url characters
    /// (24 bytes), no padding.
    ///
    /// ```
    /// # fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{Attempt, OperationId, OwnerToken};
    /// let attempt = Attempt::new(OperationId::new("nightly")?)?;
    /// let stored = attempt.owner().expose().to_owned(); // persisted with the operation id
    /// let again = Attempt::from_parts(OwnerToken::parse(&stored)?, OperationId::new("nightly")?);
    /// assert_eq!(again, attempt);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidOwnerToken`] (the text is not echoed).
    pub fn parse(text: &str) -> Result<Self, LeaseError> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| LeaseError::InvalidOwnerToken {
                rule: "must be base64url without padding",
            })?;
        if bytes.len() != OWNER_TOKEN_BYTES {
            return Err(LeaseError::InvalidOwnerToken {
                rule: "must encode 24 bytes (32 characters)",
            });
        }
        Ok(Self(text.to_owned()))
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerToken(<redacted>)")
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The caller's name for one logical operation (a job run, a migration step):
/// 1 ..= 128 bytes of printable ASCII, no spaces.
///
/// Two attempts with the same owner token but different operation ids conflict
/// (`OwnerOperationConflict`) rather than replay, so one owner cannot silently take over
/// another operation's lease.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OperationId(String);

impl OperationId {
    /// Validates `text`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidOperationId`] naming the rule it broke.
    pub fn new(text: &str) -> Result<Self, LeaseError> {
        let rule = if text.is_empty() {
            "must not be empty"
        } else if text.len() > OPERATION_ID_MAX_LEN {
            "must be at most 128 bytes"
        } else if !text.bytes().all(|b| b.is_ascii_graphic()) {
            "may contain only printable ASCII without spaces"
        } else {
            return Ok(Self(text.to_owned()));
        };
        Err(LeaseError::InvalidOperationId { rule })
    }

    /// The validated text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperationId({:?})", self.0)
    }
}

/// One acquisition attempt: an owner token plus an operation id.
///
/// Keep it to retry after an `Indeterminate` outcome: the retry either replays the original
/// acquisition (same fencing token, server's remaining TTL) or finds the lease gone.
/// `Debug` and `Display` redact the owner token.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Attempt {
    owner: OwnerToken,
    operation: OperationId,
}

impl Attempt {
    /// A fresh owner token for `operation`.
    ///
    /// # Errors
    /// [`LeaseError::EntropyUnavailable`] if the OS random source fails.
    pub fn new(operation: OperationId) -> Result<Self, LeaseError> {
        Ok(Self {
            owner: OwnerToken::generate()?,
            operation,
        })
    }

    /// Rebuilds an attempt from its parts, e.g. one persisted across a process restart
    /// (the owner token read back with [`OwnerToken::parse`]).
    pub fn from_parts(owner: OwnerToken, operation: OperationId) -> Self {
        Self { owner, operation }
    }

    /// The owner token (redacted when printed).
    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// The operation id.
    pub fn operation(&self) -> &OperationId {
        &self.operation
    }
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("owner", &self.owner)
            .field("operation", &self.operation)
            .finish()
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (owner <redacted>)", self.operation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exposed_owner_token_parses_back_and_nothing_else_does() {
        let token = OwnerToken::generate().expect("entropy");
        assert_eq!(OwnerToken::parse(token.expose()).expect("parses"), token);
        let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"; // 36 chars, 27 bytes
        for bad in [
            "",
            "short",
            secret,
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "+AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            let err = OwnerToken::parse(bad).expect_err(bad);
            assert!(
                matches!(err, LeaseError::InvalidOwnerToken { .. }),
                "{bad}: {err}"
            );
            assert!(
                bad.is_empty() || !err.to_string().contains(bad),
                "{err} echoes the text"
            );
        }
    }

    #[test]
    fn owner_tokens_are_32_chars_of_base64url_and_distinct() {
        let a = OwnerToken::generate().unwrap();
        let b = OwnerToken::generate().unwrap();
        assert_eq!(a.expose().len(), 32);
        assert!(
            a.expose()
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(a, b);
    }

    #[test]
    fn attempt_debug_and_display_redact_the_owner() {
        let attempt = Attempt::new(OperationId::new("job-1").unwrap()).unwrap();
        let secret = attempt.owner().expose().to_owned();
        for text in [format!("{attempt:?}"), attempt.to_string()] {
            assert!(!text.contains(&secret), "{text}");
            assert!(text.contains("job-1"));
            assert!(text.contains("redacted"));
        }
    }

    #[test]
    fn operation_id_bounds() {
        assert!(OperationId::new("a").is_ok());
        assert!(OperationId::new(&"x".repeat(128)).is_ok());
        for bad in ["", "a b", "tab\t", &"x".repeat(129), "é"] {
            assert!(matches!(
                OperationId::new(bad),
                Err(LeaseError::InvalidOperationId { .. })
            ));
        }
    }
}
