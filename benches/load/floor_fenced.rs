//! The fenced floor (rows `floor-fenced-…`): the raw `redis` crate doing the leanest lease
//! cycle leasehold's design allows — a fencing token per acquisition and a release notice —
//! so leasehold's W and R rows can be read against what fencing itself must cost, not only
//! against the bare lock (`floor-…`, `SET NX PX`).
//!
//! * Acquire: one script call ([`FLOOR_FENCED_ACQUIRE_LUA`]): `GET` of the lease (held:
//!   refused), the token `max(last + 1, server TIME in µs)` from the group's fence counter by
//!   one `SET fence token GET`, then `SET lease "<owner> <token>" PX ttl`.
//! * Release: owner-checked `DEL` and a `PUBLISH` of the release notice in one script
//!   ([`FLOOR_RELEASE_PUBLISH_LUA`], floor-H's); where the server has `DELIFEQ` (Valkey 9 and
//!   later, read from `INFO server` as leasehold reads it: `ServerCapabilities`), `DELIFEQ`
//!   and the `PUBLISH`, pipelined, as leasehold's native release does.
//! * Renew (R): an owner-checked `PEXPIRE` script ([`FLOOR_FENCED_RENEW_LUA`]); where the
//!   server has `SET … IFEQ` (Valkey 8.1 and later), `SET lease value IFEQ value PX ttl`.
//!
//! With `LEASEHOLD_BENCH_SCRIPTS` set it runs on the scripts alone, as leasehold's rows do.
//! The keys are laid out as leasehold's: the lease `<key>:{gggg}` and the fence counter
//! `floor-fenced:{gggg}:fence` of its group (4 hex digits of a hash of the key: at most
//! 65,536 counters, as leasehold has, and both keys in one cluster slot); the notice goes to
//! `<lease>:released`. No holder label, no lock-delay, no line of waiters, no acquisition
//! notice: leasehold has all of these, so its cost above this floor is theirs and its own.

use super::*;

/// The fenced floor on one multiplexed connection, like leasehold's.
#[derive(Clone)]
pub(crate) struct FloorFenced {
    pub(crate) con: MultiplexedConnection,
    acquire: Arc<redis::Script>,
    release: Arc<redis::Script>,
    renew: Arc<redis::Script>,
    /// Stands for leasehold's owner token: 32 characters.
    owner: Arc<str>,
    capabilities: ServerCapabilities,
}

/// The lease key and its group's fence counter, for the workload's `key`.
pub(crate) fn fenced_keys(key: &str) -> (String, String) {
    // FNV-1a, folded to the 4 hex digits of leasehold's groups.
    let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let group = (hash ^ (hash >> 16)) & 0xffff;
    (
        format!("{key}:{{{group:04x}}}"),
        format!("floor-fenced:{{{group:04x}}}:fence"),
    )
}

impl FloorFenced {
    pub(crate) async fn new(env: &Env) -> Self {
        let mut con = env.connection().await;
        let capabilities = if crate::scripts_only() {
            ServerCapabilities::SCRIPTS_ONLY
        } else {
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut con)
                .await
                .expect("floor-fenced: INFO server");
            ServerCapabilities::from_info(&info)
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            con,
            acquire: Arc::new(redis::Script::new(FLOOR_FENCED_ACQUIRE_LUA)),
            release: Arc::new(redis::Script::new(FLOOR_RELEASE_PUBLISH_LUA)),
            renew: Arc::new(redis::Script::new(FLOOR_FENCED_RENEW_LUA)),
            owner: format!("{:016x}{:016x}", std::process::id(), nanos as u64).into(),
            capabilities,
        }
    }

    /// Whether a renewal is the server's `SET … IFEQ` rather than the script.
    pub(crate) fn renews_natively(&self) -> bool {
        self.capabilities.renews_natively()
    }

    /// One acquisition of `lease` (absent): its value `"<owner> <token>"`, or `None` when
    /// the lease is held.
    pub(crate) async fn try_acquire(
        &mut self,
        lease: &str,
        fence: &str,
        ttl: Duration,
    ) -> redis::RedisResult<Option<String>> {
        let token: Option<u64> = self
            .acquire
            .key(lease)
            .key(fence)
            .arg(&*self.owner)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.con)
            .await?;
        Ok(token.map(|token| format!("{} {token}", self.owner)))
    }

    /// The owner-checked release of `lease` holding `value`, with its notice: whether it
    /// deleted the lease.
    pub(crate) async fn try_release(
        &mut self,
        lease: &str,
        value: &str,
    ) -> redis::RedisResult<bool> {
        let channel = [lease, ":released"].concat();
        let deleted: i64 = if self.capabilities.releases_natively() {
            let (deleted, _receivers): (i64, i64) = redis::pipe()
                .cmd("DELIFEQ")
                .arg(lease)
                .arg(value)
                .cmd("PUBLISH")
                .arg(&channel)
                .arg("released")
                .query_async(&mut self.con)
                .await?;
            deleted
        } else {
            self.release
                .key(lease)
                .arg(value)
                .arg(&channel)
                .invoke_async(&mut self.con)
                .await?
        };
        Ok(deleted == 1)
    }

    /// The owner-checked renewal of `lease` holding `value`: whether it was still held.
    pub(crate) async fn try_renew(
        &mut self,
        lease: &str,
        value: &str,
        ttl: Duration,
    ) -> redis::RedisResult<bool> {
        let ttl_ms = ttl.as_millis() as u64;
        if self.capabilities.renews_natively() {
            let reply: Option<String> = redis::cmd("SET")
                .arg(lease)
                .arg(value)
                .arg("IFEQ")
                .arg(value)
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut self.con)
                .await?;
            Ok(reply.is_some())
        } else {
            let renewed: i64 = self
                .renew
                .key(lease)
                .arg(value)
                .arg(ttl_ms)
                .invoke_async(&mut self.con)
                .await?;
            Ok(renewed == 1)
        }
    }
}

impl Baseline for FloorFenced {
    /// The lease key and its value.
    type Held = (String, String);

    fn name(&self) -> &'static str {
        "floor-fenced"
    }

    async fn try_lock_once(&mut self, key: &str) -> Option<Self::Held> {
        let (lease, fence) = fenced_keys(key);
        let value = self
            .try_acquire(&lease, &fence, LOCK_TTL)
            .await
            .unwrap_or_else(|e| panic!("floor-fenced: acquire {lease}: {e}"))?;
        Some((lease, value))
    }

    async fn unlock_held(&mut self, (lease, value): Self::Held) {
        let deleted = self
            .try_release(&lease, &value)
            .await
            .unwrap_or_else(|e| panic!("floor-fenced: release {lease}: {e}"));
        assert!(deleted, "floor-fenced: release of {lease} deleted nothing");
    }
}
