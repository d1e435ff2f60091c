//! The one script leasehold sends: `lua/plain.lua` (a call of plain acquisitions and
//! releases, run before anything else is defined), then `lua/batch.lua` after the four
//! operations it runs, each in its own file, and the ownership check two of them share. Source and SHA1 computed once; sent with `EVALSHA`, loaded again on
//! `NOSCRIPT` (after a `SCRIPT FLUSH` or a restart without persistence).

use std::sync::LazyLock;

use redis::Script;

pub(super) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../../lua/plain.lua"),
        "\n",
        include_str!("../../../lua/owner.lua"),
        "\n",
        include_str!("../../../lua/line.lua"),
        "\n",
        include_str!("../../../lua/acquire.lua"),
        "\n",
        include_str!("../../../lua/renew.lua"),
        "\n",
        include_str!("../../../lua/release.lua"),
        "\n",
        include_str!("../../../lua/inspect.lua"),
        "\n",
        include_str!("../../../lua/batch.lua"),
    ))
});
