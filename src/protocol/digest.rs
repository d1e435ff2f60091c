//! `ResourceDigest`: the only resource identity leasehold accepts.
//!
//! A raw resource id (a tenant name, a file path, an account number) is hashed in this
//! process and never reaches Redis, a log line or `Debug` output.

use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::error::LeaseError;

/// Domain separation: a digest made by leasehold v1 never equals a plain SHA-256 of the same
/// bytes made elsewhere, and a future scheme can change the prefix without collisions.
const DOMAIN: &[u8] = b"leasehold:resource:v1\0";
const TEXT_PREFIX: &str = "sha256:";

/// SHA-256 of a resource id under a version prefix.
///
/// `Display` gives the full `sha256:<64 hex>` form (what [`ResourceDigest::parse`] reads);
/// `Debug` shows only the first 12 hex digits, enough to correlate logs.
///
/// ```
/// use leasehold::ResourceDigest;
/// let d = ResourceDigest::of(b"tenant-42");
/// assert_eq!(ResourceDigest::parse(&d.to_string()).unwrap(), d);
/// assert!(!format!("{d:?}").contains("tenant-42"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceDigest([u8; 32]);

impl ResourceDigest {
    /// Hashes a raw resource id locally.
    pub fn of(resource_id: impl AsRef<[u8]>) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN);
        hasher.update(resource_id.as_ref());
        Self(hasher.finalize().into())
    }

    /// Reads the `sha256:<64 lowercase hex>` form.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDigest`]; the text is not echoed.
    pub fn parse(text: &str) -> Result<Self, LeaseError> {
        let hex = text
            .strip_prefix(TEXT_PREFIX)
            .ok_or(LeaseError::InvalidDigest {
                rule: "must start with \"sha256:\"",
            })?;
        if hex.len() != 64 {
            return Err(LeaseError::InvalidDigest {
                rule: "must have exactly 64 hex digits after \"sha256:\"",
            });
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Ok(Self(out))
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex digits (no prefix), as used in keys.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 0xf)] as char);
        }
        s
    }

    /// The first 12 hex digits: the `digest` field of log lines.
    pub fn short(&self) -> String {
        let mut hex = self.hex();
        hex.truncate(12);
        hex
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn nibble(c: u8) -> Result<u8, LeaseError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(LeaseError::InvalidDigest {
            rule: "hex digits must be 0-9 or a-f (lowercase)",
        }),
    }
}

impl fmt::Display for ResourceDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TEXT_PREFIX}{}", self.hex())
    }
}

impl fmt::Debug for ResourceDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResourceDigest({TEXT_PREFIX}{}…)", self.short())
    }
}

impl std::str::FromStr for ResourceDigest {
    type Err = LeaseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_domain_separated_sha256() {
        let plain: [u8; 32] = Sha256::digest(b"x").into();
        assert_ne!(ResourceDigest::of(b"x").as_bytes(), &plain);
        assert_eq!(ResourceDigest::of(b"x"), ResourceDigest::of("x"));
        assert_ne!(ResourceDigest::of(b"x"), ResourceDigest::of(b"y"));
    }

    #[test]
    fn parse_round_trips_and_rejects_bad_text() {
        let d = ResourceDigest::of(b"job");
        assert_eq!(ResourceDigest::parse(&d.to_string()), Ok(d));
        let upper = d.to_string().to_uppercase().replace("SHA256", "sha256");
        for bad in [
            "job".to_owned(),
            d.hex(),
            format!("sha256:{}", &d.hex()[..63]),
            upper,
        ] {
            assert!(matches!(
                ResourceDigest::parse(&bad),
                Err(LeaseError::InvalidDigest { .. })
            ));
        }
    }

    #[test]
    fn debug_shows_only_a_prefix() {
        let d = ResourceDigest::of(b"secret-tenant");
        let dbg = format!("{d:?}");
        assert!(dbg.contains(&d.short()));
        assert!(!dbg.contains(&d.hex()));
        assert!(!dbg.contains("secret-tenant"));
    }
}
