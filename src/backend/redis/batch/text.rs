//! The text an item sends: its own, or a part of a string its lease keeps for its whole
//! life (its keys, its holding's value), shared rather than copied. A renewal is the
//! operation a process sends most (one per lease per cadence), and each string it copied
//! was an allocation and a free on the path that bounds how many leases one thread keeps
//! (docs/performance.md, "R100k on one thread").

use std::ops::{Deref, Range};
use std::sync::Arc;

use redis::{RedisWrite, ToRedisArgs, ToSingleRedisArg};

/// Text an item sends, owned or shared.
#[derive(Clone)]
pub(super) enum Text {
    Own(String),
    /// `whole[range]`; the range lies on character boundaries of `whole`.
    Part {
        whole: Arc<str>,
        range: Range<usize>,
    },
}

impl Text {
    /// `whole[range]`, shared; `None` if `range` is not a part of `whole` on character
    /// boundaries.
    pub(super) fn part(whole: &Arc<str>, range: Range<usize>) -> Option<Self> {
        whole.get(range.clone())?;
        Some(Self::Part {
            whole: Arc::clone(whole),
            range,
        })
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Self::Own(text) => text,
            // Checked when made (`part`): never empty by a bad range.
            Self::Part { whole, range } => whole.get(range.clone()).unwrap_or_default(),
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        Self::Own(text)
    }
}

impl ToRedisArgs for Text {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg(self.as_bytes());
    }
}

impl ToSingleRedisArg for Text {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_the_range_of_its_whole_and_only_on_character_boundaries() {
        let whole: Arc<str> = Arc::from("ab:é:cd");
        let part = Text::part(&whole, 3..5).map(|t| t.to_string());
        assert_eq!(part.as_deref(), Some("é"));
        assert!(Text::part(&whole, 3..4).is_none(), "inside a character");
        assert!(Text::part(&whole, 5..99).is_none(), "past the end");
        assert_eq!(&*Text::from("own".to_owned()), "own");
    }
}
