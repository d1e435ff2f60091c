//! The baselines leasehold's W rows are measured against, in the same run: the raw floor
//! (`children::Floor`) and the two lock crates a Rust user would otherwise pick —
//! [rslock](https://docs.rs/rslock) (Redlock on one server: quorum 1) and
//! [async-redis-lock](https://docs.rs/async-redis-lock) — each used the way its own docs
//! show, on the same redis-server, with the same TTL and no retry (one try per call).
//!
//! Neither peer gives a fencing token or a release notice, and neither tells the holder its
//! lock is gone before it next asks (async-redis-lock sets a flag after a failed extension;
//! rslock does not renew by itself): the rows compare the cost of the lock cycle only.

use std::future::Future;

use super::*;

/// A lock leasehold is compared with: one try on a key, and the unlock of what it took.
pub(crate) trait Baseline: Clone + Send + Sync + 'static {
    /// What a successful try holds, needed to unlock it.
    type Held: Send;

    /// Row prefix: `floor`, `rslock`, `async-redis-lock`.
    fn name(&self) -> &'static str;

    /// One try, no retry: `None` when someone else holds `key`.
    fn try_lock_once(&mut self, key: &str) -> impl Future<Output = Option<Self::Held>> + Send;

    /// Unlocks what [`try_lock_once`](Self::try_lock_once) took; panics unless it did.
    fn unlock_held(&mut self, held: Self::Held) -> impl Future<Output = ()> + Send;

    /// Locks a fresh key, then unlocks it; panics unless both succeed.
    fn cycle(&mut self, key: &str) -> impl Future<Output = ()> + Send {
        async move {
            let Some(held) = self.try_lock_once(key).await else {
                panic!("{}: a fresh key {key} was refused", self.name())
            };
            self.unlock_held(held).await;
        }
    }
}

impl Baseline for Floor {
    type Held = (String, String);

    fn name(&self) -> &'static str {
        "floor"
    }

    async fn try_lock_once(&mut self, key: &str) -> Option<Self::Held> {
        let token = self.token();
        self.try_lock(key, &token)
            .await
            .then(|| (key.to_owned(), token))
    }

    async fn unlock_held(&mut self, (key, token): Self::Held) {
        self.unlock(&key, &token).await;
    }
}

/// rslock 0.10: `LockManager` on the one server, one try per `lock`.
#[derive(Clone)]
pub(crate) struct Rslock(pub(crate) rslock::LockManager);

impl Rslock {
    pub(crate) fn new(env: &Env) -> Self {
        let mut manager = rslock::LockManager::new(vec![env.url.clone()]);
        // One try (`lock` retries `count − 1` times after a refusal), as every row here.
        manager.set_retry(1, Duration::from_millis(1));
        Self(manager)
    }
}

impl Baseline for Rslock {
    type Held = rslock::Lock;

    fn name(&self) -> &'static str {
        "rslock"
    }

    async fn try_lock_once(&mut self, key: &str) -> Option<Self::Held> {
        match self.0.lock(key.as_bytes(), LOCK_TTL).await {
            Ok(lock) => Some(lock),
            Err(rslock::LockError::Unavailable) => None,
            Err(e) => panic!("rslock: lock {key}: {e}"),
        }
    }

    async fn unlock_held(&mut self, held: Self::Held) {
        self.0.unlock(&held).await;
    }
}

/// async-redis-lock 0.4: a `Locker` (one connection manager), each lock extended in the
/// background every TTL/3 until released — its own renewal, as leasehold's actors do.
#[derive(Clone)]
pub(crate) struct AsyncRedisLock {
    pub(crate) locker: async_redis_lock::Locker,
    pub(crate) options: async_redis_lock::Options,
}

impl AsyncRedisLock {
    pub(crate) async fn new(env: &Env) -> Self {
        let locker = async_redis_lock::Locker::from_redis_url(&env.url)
            .await
            .expect("async-redis-lock: connect");
        let options = async_redis_lock::Options::new()
            .ttl(LOCK_TTL)
            .extend(LOCK_TTL / 3)
            // A zero timeout is one try: refused → `Error::Timeout` at once.
            .timeout(Some(Duration::ZERO));
        Self { locker, options }
    }
}

impl Baseline for AsyncRedisLock {
    type Held = async_redis_lock::Lock;

    fn name(&self) -> &'static str {
        "async-redis-lock"
    }

    async fn try_lock_once(&mut self, key: &str) -> Option<Self::Held> {
        match self.locker.acquire_with_options(&self.options, key).await {
            Ok(lock) => Some(lock),
            Err(async_redis_lock::Error::Timeout) => None,
            Err(e) => panic!("async-redis-lock: acquire {key}: {e}"),
        }
    }

    async fn unlock_held(&mut self, held: Self::Held) {
        held.release().await.expect("async-redis-lock: release");
    }
}

/// The peers, connected and warmed up (connections made, scripts loaded).
pub(crate) struct Peers {
    pub(crate) rslock: Rslock,
    pub(crate) async_redis_lock: AsyncRedisLock,
}

impl Peers {
    pub(crate) async fn new(env: &Env) -> Self {
        let mut rslock = Rslock::new(env);
        let mut async_redis_lock = AsyncRedisLock::new(env).await;
        for i in 0..50 {
            rslock.cycle(&format!("rslock:{}:warm:{i}", env.run)).await;
            async_redis_lock
                .cycle(&format!("async-redis-lock:{}:warm:{i}", env.run))
                .await;
        }
        Self {
            rslock,
            async_redis_lock,
        }
    }
}
