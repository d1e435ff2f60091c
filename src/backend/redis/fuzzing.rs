//! The script-reply decoders and the [`Holding`] a handle builds, for
//! `leasehold::fuzzing` (`crate::backend::fuzzing` says what it is for).
//!
//! Each function is the crate's own code `RedisBackend` or a handle runs, unchanged;
//! nothing here may hold logic of its own, or the fuzz targets would test it instead of
//! the decoders.

use redis::Value;

use super::{classify, parse};
use crate::backend::SendFailure;
use crate::protocol::{
    AcquireReply, FencingToken, Holding, InspectReply, LeaseRequest, ReleaseReply, RenewReply,
};

/// The decoder of one acquire item's reply; `Err` says why it is unreadable.
pub fn acquire(value: Value) -> Result<AcquireReply, String> {
    parse::acquire(value)
}

/// The decoder of one renew item's reply.
pub fn renew(value: Value) -> Result<RenewReply, String> {
    parse::renew(value)
}

/// The decoder of one release item's reply.
pub fn release(value: Value) -> Result<ReleaseReply, String> {
    parse::release(value)
}

/// The decoder of one inspect item's reply: the lease's state (the line's length it also
/// reads is checked by the decoder's own tests).
pub fn inspect(value: Value) -> Result<InspectReply, String> {
    parse::inspect(value).map(|inspected| inspected.reply)
}

/// The holding a handle keeps for `request`'s acquisition that issued `token`: with the
/// exact value of its lease key, which a server's own commands compare against.
pub fn holding(request: &LeaseRequest, token: FencingToken) -> Holding {
    Holding::acquired(request, token)
}

/// The decoder of a whole script call's reply: call `id` with `n` items.
pub fn batch(value: Value, id: u64, n: usize) -> Result<Vec<Value>, String> {
    parse::batch(value, id, n)
}

/// How an error reply is classified — an item's own error, or the whole call's — as the
/// backend does it; `None` for a value that is not an error reply.
pub fn error_reply(value: Value) -> Option<SendFailure> {
    match value {
        Value::ServerError(e) => Some(classify::command_failure(&redis::RedisError::from(e))),
        _ => None,
    }
}
