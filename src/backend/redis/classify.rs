//! The one place that sorts redis errors into *not executed* and *may have executed*.
//!
//! The rule (docs/design.md §12): only a failure to obtain a connection, or a server error
//! that Redis raises before running a command, proves the command did not run. Every other
//! I/O failure — a broken pipe included, which Redis clients report both before and after
//! the write — may have executed.

use redis::{ErrorKind, RedisError};

use crate::backend::{FailureDetail, FailureKind, SendFailure};

/// Server error codes Redis raises before it runs a command or a script's first write.
const REFUSED_BEFORE_RUNNING: &[&str] = &[
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "OOM",
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "READONLY",
    "MISCONF",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "MOVED",
    "ASK",
    "CROSSSLOT",
    "NOREPLICAS",
    "NOSCRIPT",
];

/// Classifies an error from establishing a connection: nothing was sent on it.
pub(super) fn connect_failure(err: &RedisError) -> SendFailure {
    SendFailure::NotSent(FailureDetail::new(FailureKind::Connect, err.to_string()))
}

/// Classifies an error returned by a command on an established connection.
pub(super) fn command_failure(err: &RedisError) -> SendFailure {
    if let Some(code) = err.code()
        && REFUSED_BEFORE_RUNNING.contains(&code)
    {
        return SendFailure::NotSent(FailureDetail::new(
            FailureKind::ServerRefused,
            err.to_string(),
        ));
    }
    let kind = match err.kind() {
        ErrorKind::Io if err.is_timeout() => FailureKind::Timeout,
        ErrorKind::Io => FailureKind::ConnectionLost,
        ErrorKind::Server(_) | ErrorKind::Extension => FailureKind::ServerError,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => FailureKind::MalformedReply,
        // `ErrorKind` is non-exhaustive: anything new is treated as the uncertain case.
        _ => FailureKind::ConnectionLost,
    };
    SendFailure::MaybeSent(FailureDetail::new(kind, err.to_string()))
}

/// Server error codes of a node that is not (or no longer) the primary. After a failover
/// the old primary is demoted and refuses our scripts' first write with `READONLY`.
const NOT_THE_PRIMARY: &[&str] = &["READONLY", "MASTERDOWN"];

/// Whether the next call must start on a new connection after `err`: the connection is
/// unusable, or it leads to a node that is not the primary (a new connection finds the
/// primary again: under Sentinel by asking the sentinels, standalone by resolving the URL's
/// host again, as after a DNS-based failover).
pub(super) fn needs_new_connection(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_unrecoverable_error()
        || err
            .code()
            .is_some_and(|code| NOT_THE_PRIMARY.contains(&code))
}

/// Whether a whole script call refused with `err` might have run some of its items alone:
/// an ACL that forbids some keys (`NOPERM`) refuses the whole call for the keys of one item.
/// Such a call ran nothing, so its items may be sent again one by one.
pub(super) fn may_concern_some_keys(err: &RedisError) -> bool {
    err.code() == Some("NOPERM")
}

/// Whether `err` refuses a command itself to the user (`NOPERM … no permissions to run the
/// '<command>' command`), as opposed to one of its keys or channels: the command did not
/// run, and none of its kind will on this connection.
pub(super) fn command_refused(err: &RedisError) -> bool {
    err.code() == Some("NOPERM") && err.detail().is_some_and(|d| d.contains("to run the"))
}

/// Whether `failure` is a `TRYAGAIN` refusal: a Cluster node asked for several keys of a
/// slot that is migrating, of which some have moved and some not. Nothing ran. (The redis
/// crate names the code `TryAgain` first in the error's text, which is all the detail
/// keeps; tests/cluster.rs meets it on a real migration.)
pub(super) fn is_try_again(failure: &SendFailure) -> bool {
    matches!(failure, SendFailure::NotSent(d)
        if d.kind == FailureKind::ServerRefused && d.message.starts_with("TryAgain"))
}
