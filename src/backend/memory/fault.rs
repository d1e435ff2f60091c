//! The faults [`MemoryBackend`](super::MemoryBackend) can inject.

use std::time::Duration;

/// A fault [`MemoryBackend`](super::MemoryBackend) applies to every call until cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryFault {
    /// Calls fail at once without executing, like a refused connection: outcomes are
    /// `Unavailable`.
    Unavailable,
    /// Calls execute, then wait out their timeout and fail as a reply lost on the way back
    /// would: outcomes are `Indeterminate`.
    LoseReply,
    /// Calls do not execute, wait out their timeout and fail as `LoseReply` does, like a
    /// request lost on the way (the caller cannot tell the two apart).
    LoseRequest,
    /// Calls take this long before executing; if that is longer than their timeout, they
    /// execute and the reply is lost.
    Slow(Duration),
}
