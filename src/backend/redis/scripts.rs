//! One `Script` per `lua/*.lua`: source and SHA1 computed once, sent with `EVALSHA`, loaded
//! again on `NOSCRIPT` (after a `SCRIPT FLUSH` or a restart without persistence).

use std::sync::LazyLock;

use redis::Script;

pub(super) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/acquire.lua")));
pub(super) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/renew.lua")));
pub(super) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/release.lua")));
pub(super) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/inspect.lua")));
