//! The code side of one trace: leasehold's backend (memory, or a real server), the lease
//! the trace runs on, and the clock that stands for the model's ticks.
//!
//! Time. A tick is `tick` of the code's clock: tokio's paused clock on the memory
//! backend, the real clock on a server. Every duration is set so that no expiry can fall
//! where a command runs: a lease's ttl is `ttl` ticks less half a tick, its lock-delay
//! whole ticks, and on a server every command of a tick must have its reply within the
//! first half of the tick (`in_window`). A key the model expires at tick `k` then expires
//! in the code between `k − ½` and `k` ticks, while nothing runs; a PTTL read at tick `j`
//! is `(k − j) · tick − ½ tick` give or take the half tick, and rounds to `k − j` ticks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::fuzzing::calls::LineSession;
use leasehold::fuzzing::{
    AcquireReply, InspectReply, ReleaseNotices, ReleaseReply, RenewReply, SendFailure, calls,
};
use leasehold::{
    Attempt, FencingToken, LeaseBackend, LeaseKeys, LeaseRequest, MemoryBackend, Namespace,
    OperationId, OwnerToken, Purpose, ResourceDigest,
};
use leasehold_model::Config;
use tokio::time::Instant;

/// Bound of one backend call; a server answers in well under a millisecond.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a server's turn notice may take to arrive after the reply of the acquisition
/// that sent it (the memory backend's is there with the reply).
const NOTICE_WAIT: Duration = Duration::from_millis(100);

/// Where the trace runs.
#[derive(Clone)]
pub enum Backend {
    /// A fresh store per trace, on tokio's paused clock.
    Memory(MemoryBackend),
    /// A real server, and a connection of the test's own for what no script does
    /// (deleting keys, as an eviction or a flush would).
    Server {
        backend: Arc<dyn LeaseBackend>,
        raw: redis::aio::MultiplexedConnection,
    },
}

/// One trace's lease, clients and clock on the code's side.
pub struct Code {
    backend: Backend,
    tick: Duration,
    /// When tick 1 (the model's first) began.
    start: Instant,
    /// The model's tick now.
    now: u8,
    keys: LeaseKeys,
    purpose: Purpose,
    resource: ResourceDigest,
    /// One owner token per client, as each process has its own.
    owners: Vec<OwnerToken>,
    permits: u8,
    ttl: Duration,
    delay: Option<Duration>,
    /// Each waiting attempt's line session and its turn subscription: one session per
    /// attempt, so that a dead waiter's entry is not kept alive by its client's next
    /// attempt (the model keeps one alive key per attempt). The subscription sits in a
    /// mutex only so that `Code` is `Sync` (the replay's calls borrow it across awaits); it
    /// is reached through `get_mut`, never locked.
    waiters: BTreeMap<(u8, u8), (LineSession, Mutex<ReleaseNotices>)>,
}

impl Code {
    /// The code side of trace `trace` of `config`, its tick `tick` long, starting now.
    pub fn new(backend: Backend, config: &Config, trace: u64, tick: Duration) -> Code {
        let purpose = Purpose::new(&format!("trace-{trace}")).expect("purpose");
        let resource = ResourceDigest::of(format!("resource-{trace}"));
        let namespace = Namespace::new("conformance").expect("namespace");
        let keys = LeaseKeys::new(&namespace, &purpose, &resource).counted(config.permits.into());
        let owners = (0..config.clients)
            .map(|_| OwnerToken::generate().expect("entropy"))
            .collect();
        let ttl = tick * u32::from(config.ttl) - tick / 2;
        let delay = (config.delay > 0).then(|| tick * u32::from(config.delay));
        Code {
            backend,
            tick,
            start: Instant::now(),
            now: 1,
            keys,
            purpose,
            resource,
            owners,
            permits: config.permits,
            ttl,
            delay,
            waiters: BTreeMap::new(),
        }
    }

    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The model's clock advances a tick: so does the code's.
    pub async fn advance(&mut self) {
        self.now += 1;
        match &self.backend {
            Backend::Memory(_) => tokio::time::advance(self.tick).await,
            Backend::Server { .. } => tokio::time::sleep_until(self.tick_start()).await,
        }
    }

    fn tick_start(&self) -> Instant {
        self.start + self.tick * u32::from(self.now - 1)
    }

    /// Whether a command now would run, and its reply come, in the first half of the
    /// tick (with a 2 ms margin): always on the paused clock.
    pub fn in_window(&self) -> bool {
        match self.backend {
            Backend::Memory(_) => true,
            Backend::Server { .. } => {
                Instant::now() + Duration::from_millis(2) < self.tick_start() + self.tick / 2
            }
        }
    }

    /// Whether times finer than a tick differ between keys (a real server's clock): ties
    /// the model breaks by slot order, the code may break by milliseconds.
    pub fn sub_tick(&self) -> bool {
        matches!(self.backend, Backend::Server { .. })
    }

    /// The model's attempt as leasehold's: the client's owner token and the operation id.
    pub fn attempt(&self, attempt: leasehold_model::server::Attempt) -> Attempt {
        let owner = self.owners[usize::from(attempt.client)].clone();
        let op = OperationId::new(&format!("op-{}", attempt.op)).expect("operation id");
        Attempt::from_parts(owner, op)
    }

    /// The request an attempt's acquisition sends.
    pub fn request(&self, attempt: &Attempt) -> LeaseRequest {
        let mut builder =
            LeaseRequest::builder(self.purpose.clone(), self.resource, attempt.clone())
                .ttl(self.ttl)
                .permits(self.permits.into());
        if let Some(delay) = self.delay {
            builder = builder.lock_delay(delay);
        }
        builder.build().expect("request")
    }

    fn backend(&self) -> &dyn LeaseBackend {
        match &self.backend {
            Backend::Memory(memory) => memory,
            Backend::Server { backend, .. } => backend.as_ref(),
        }
    }

    pub async fn acquire(&self, attempt: &Attempt) -> Result<AcquireReply, SendFailure> {
        let request = self.request(attempt);
        calls::acquire(self.backend(), &self.keys, &request, TIMEOUT).await
    }

    /// A renewal as the handle of `attempt`'s grant of `token` in `slot` sends it.
    pub async fn renew(
        &self,
        attempt: &Attempt,
        slot: u8,
        token: FencingToken,
    ) -> Result<RenewReply, SendFailure> {
        let holding = leasehold::fuzzing::holding(&self.request(attempt), token);
        let keys = self.keys.for_slot(slot.into());
        calls::renew(self.backend(), &keys, &holding, self.ttl, TIMEOUT).await
    }

    /// A release as the handle of `attempt`'s grant of `token` in `slot` sends it.
    pub async fn release(
        &self,
        attempt: &Attempt,
        slot: u8,
        token: FencingToken,
    ) -> Result<ReleaseReply, SendFailure> {
        let holding = leasehold::fuzzing::holding(&self.request(attempt), token);
        let keys = self.keys.for_slot(slot.into());
        calls::release(self.backend(), &keys, &holding, TIMEOUT).await
    }

    pub async fn inspect(&self, attempt: &Attempt, slot: u8) -> Result<InspectReply, SendFailure> {
        let keys = self.keys.for_slot(slot.into());
        calls::inspect(self.backend(), &keys, attempt, TIMEOUT).await
    }

    /// W: the wait loop's acquisition for `attempt` (`first`: its first try, which joins at
    /// once), as a waiter of the attempt's own line session, subscribed to its turn
    /// before its first try as the wait loop is.
    pub async fn wait(
        &mut self,
        model: leasehold_model::server::Attempt,
        first: bool,
    ) -> Result<AcquireReply, SendFailure> {
        let attempt = self.attempt(model);
        self.session(model, &attempt).await?;
        let request = self.request(&attempt);
        let (session, _) = &self.waiters[&(model.client, model.op)];
        calls::acquire_in_line(
            self.backend(),
            &self.keys,
            &request,
            session,
            first,
            TIMEOUT,
        )
        .await
    }

    /// K: the keep-alive of `attempt`'s line session, as the session's keeper writes it.
    pub async fn keep_alive(
        &mut self,
        model: leasehold_model::server::Attempt,
    ) -> Result<(), SendFailure> {
        let attempt = self.attempt(model);
        self.session(model, &attempt).await?;
        let (session, _) = &self.waiters[&(model.client, model.op)];
        calls::keep_in_line(self.backend(), &self.keys, session, TIMEOUT).await
    }

    /// Makes `model`'s line session and subscribes to its turn, unless it has one.
    async fn session(
        &mut self,
        model: leasehold_model::server::Attempt,
        attempt: &Attempt,
    ) -> Result<(), SendFailure> {
        if self.waiters.contains_key(&(model.client, model.op)) {
            return Ok(());
        }
        let session = LineSession::new();
        let turn =
            calls::subscribe_turn(self.backend(), &self.keys, attempt, &session, TIMEOUT).await?;
        self.waiters
            .insert((model.client, model.op), (session, Mutex::new(turn)));
        Ok(())
    }

    /// The waiting attempts told their turn since the last look (each notice taken), in
    /// the order of their ids, without waiting.
    pub async fn turns_told(&mut self) -> Vec<leasehold_model::server::Attempt> {
        let mut told = Vec::new();
        for (&(client, op), (_, turn)) in &mut self.waiters {
            let turn = turn.get_mut().unwrap_or_else(PoisonError::into_inner);
            if tokio::time::timeout(Duration::ZERO, turn.next())
                .await
                .is_ok_and(|alive| alive)
            {
                told.push(leasehold_model::server::Attempt { client, op });
            }
        }
        told
    }

    /// Whether `model`'s waiter is told its turn: at once on the memory backend, within
    /// [`NOTICE_WAIT`] on a server (a notice travels on a connection of its own).
    pub async fn told(&mut self, model: leasehold_model::server::Attempt) -> bool {
        let wait = match self.backend {
            Backend::Memory(_) => Duration::ZERO,
            Backend::Server { .. } => NOTICE_WAIT,
        };
        let Some((_, turn)) = self.waiters.get_mut(&(model.client, model.op)) else {
            return false;
        };
        let turn = turn.get_mut().unwrap_or_else(PoisonError::into_inner);
        tokio::time::timeout(wait, turn.next())
            .await
            .is_ok_and(|alive| alive)
    }

    /// The turn notices that came after the trace's last step (a server's travel on a
    /// connection of their own: they are given [`NOTICE_WAIT`]).
    pub async fn settle(&mut self) -> Vec<leasehold_model::server::Attempt> {
        if self.waiters.is_empty() {
            return Vec::new();
        }
        if let Backend::Server { .. } = self.backend {
            tokio::time::sleep(NOTICE_WAIT).await;
        }
        self.turns_told().await
    }

    /// The fence counter is evicted. The memory backend never loses its counter (it has
    /// no TIME floor to fall back on): there the step changes nothing, and the tokens
    /// after it are still compared by their order.
    pub async fn evict(&self) {
        if let Backend::Server { raw, .. } = &self.backend {
            let _: () = redis::cmd("DEL")
                .arg(self.keys.fence())
                .query_async(&mut raw.clone())
                .await
                .expect("DEL fence");
        }
    }

    /// `FLUSHALL`, as far as this trace's keys go (other traces run beside it on the same
    /// server): every slot key and the counter. On the memory backend the slot keys only,
    /// as an operator's `DEL` (its counter is never lost).
    pub async fn flush(&self) {
        let slots: Vec<LeaseKeys> = (0..u16::from(self.permits))
            .map(|slot| self.keys.for_slot(slot))
            .collect();
        match &self.backend {
            Backend::Memory(memory) => {
                for keys in &slots {
                    memory.delete(keys);
                }
            }
            Backend::Server { raw, .. } => {
                let mut del = redis::cmd("DEL");
                del.arg(self.keys.fence());
                for keys in &slots {
                    del.arg(keys.lease());
                }
                let _: () = del.query_async(&mut raw.clone()).await.expect("DEL keys");
            }
        }
    }
}
