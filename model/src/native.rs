//! The server's own commands for a renewal and a release (docs/design.md §4, Valkey 8.1+
//! and 9.0+): they compare the key's whole value, where the script compares the
//! `"<owner> <op> "` prefix, and every answer they cannot give is sent to the script.
//!
//! The model keeps them to show the two paths answer alike: a whole value differs from the
//! prefix only in the token (and in the holder label and lock-delay, which for one attempt
//! are the client's own), so a mismatch of this attempt's key is the script's to answer —
//! which it answers as it would have anyway. The runs with `Config::native` check that.

use crate::server::{Attempt, Call, Key, Reply, Token};

impl Call<'_> {
    /// The value the client knows its lease key holds.
    fn is_exactly(key: &Key, attempt: Attempt, token: Token) -> bool {
        key.attempt == attempt && key.token == token
    }

    /// `SET lease value IFEQ value GET PX ttl` — for a lease without lock-delay only, as
    /// the client sends it: ours → RENEWED, nil → ABSENT, another attempt's → NOT_OWNER,
    /// this attempt's under another value → the script.
    pub fn renew_native(&mut self, slot: u8, attempt: Attempt, token: Token) -> Reply {
        if self.config.delay > 0 {
            return self.renew(slot, attempt);
        }
        let index = usize::from(slot);
        match self.data.slots[index] {
            None => Reply::Absent,
            Some(key) if Self::is_exactly(&key, attempt, token) => {
                let expires = self.now + self.config.ttl;
                self.data.slots[index] = Some(Key { expires, ..key });
                Reply::Done
            }
            Some(key) if key.attempt != attempt => Reply::NotOwner,
            Some(_) => self.renew(slot, attempt),
        }
    }

    /// `DELIFEQ lease value`: 1 → RELEASED; 0 → the script, which tells ABSENT from
    /// NOT_OWNER and releases this attempt's key held under another value.
    pub fn release_native(&mut self, slot: u8, attempt: Attempt, token: Token) -> Reply {
        let index = usize::from(slot);
        match self.data.slots[index] {
            Some(key) if Self::is_exactly(&key, attempt, token) => {
                self.data.slots[index] = None;
                Reply::Done
            }
            _ => self.release(slot, attempt),
        }
    }
}
