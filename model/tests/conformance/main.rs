//! Conformance of the model to the code: random traces of the model (every configuration
//! the checker runs) replayed against leasehold's memory backend and against a real server
//! started by the tests' harness (`LEASEHOLD_REDIS_SERVER` names another binary: CI runs
//! this on Redis 6.2 and 8.2 and Valkey 9.1 too). Every reply the code gives must be the model's.
//!
//! `LEASEHOLD_CONFORMANCE_SEED` (a number) walks other traces than the fixed default's;
//! `LEASEHOLD_CONFORMANCE_TRACES` sets the traces per configuration on a server (the
//! memory backend runs ten times as many). A failure prints its trace's seed and steps.

mod code;
mod compare;
#[path = "../../../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;
mod replay;
mod report;
mod walk;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use leasehold::fuzzing::calls;
use leasehold::{LeaseBackend, MemoryBackend, RedisBackend, RedisConfig};
use leasehold_model::{Config, LeaseModel};
use tokio::sync::Semaphore;

use code::{Backend, Code};
use redis_server::RedisServer;
use report::Report;

/// A tick of the model on the code's clock: long enough that a tick's commands all have
/// their replies within its first half on a loaded machine (code.rs).
const TICK: Duration = Duration::from_millis(50);
/// One trace of a configuration with waiters per this many of one without: their tick is
/// seconds long (`tick_of`), so a trace takes its two ticks (`Config::line`'s clock) of
/// wall time on a server.
const LINE_SHARE: u64 = 2;
/// Traces per configuration on a server, unless `LEASEHOLD_CONFORMANCE_TRACES` says.
const SERVER_TRACES: u64 = 1000;
/// Traces that run at once on a server, each on a lease of its own (twice as many with
/// waiters: their ticks are seconds long, their commands as few).
const AT_ONCE: usize = 64;

fn seed() -> u64 {
    std::env::var("LEASEHOLD_CONFORMANCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1ea5e)
}

fn server_traces() -> u64 {
    std::env::var("LEASEHOLD_CONFORMANCE_TRACES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SERVER_TRACES)
}

/// A tick of `config` on the code's clock. With waiters, the line's KEEP is the code's
/// constant (`lua/line.lua` `KEEP_MS`): the tick is cut so that it is `keep` ticks less
/// half a tick, as a lease's ttl is (code.rs), and no place ends where a command runs.
fn tick_of(config: &Config) -> Duration {
    match config.waiting() {
        true => calls::LINE_KEEP * 2 / (2 * u32::from(config.keep) - 1),
        false => TICK,
    }
}

/// Traces of `config` on a server (ten times as many on the memory backend).
fn traces_of(config: &Config) -> u64 {
    match config.waiting() {
        true => server_traces().div_ceil(LINE_SHARE),
        false => server_traces(),
    }
}

/// The seed of trace `trace` of configuration `config`.
fn trace_seed(config: usize, trace: u64) -> u64 {
    seed().wrapping_add((config as u64) << 32 | trace)
}

/// The two replays one after the other: the real server's is judged by the wall clock (a
/// reply late in its tick spoils its trace), and the memory replay, CPU-bound for seconds,
/// beside it on a two-core machine spoiled more than one trace in ten.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(start_paused = true)]
async fn the_memory_backend_answers_as_the_model() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut report = Report::new("memory", seed());
    for (index, (name, config)) in walk::configurations().into_iter().enumerate() {
        let model = LeaseModel::new(config.clone());
        let started = std::time::Instant::now();
        for trace in 0..traces_of(&config) * 10 {
            let backend = Backend::Memory(MemoryBackend::new());
            let mut code = Code::new(backend, &config, trace, tick_of(&config));
            let seed = trace_seed(index, trace);
            match replay::replay(&model, &mut code, seed).await {
                Ok(explored) => report.add(name, explored),
                Err(e) => panic!("memory backend, {name}: {e}"),
            }
        }
        report.took(name, started.elapsed());
    }
    report.print();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_answers_as_the_model() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = RedisServer::start();
    let binary = redis_server::find_binary();
    let backend: Arc<dyn LeaseBackend> =
        Arc::new(RedisBackend::new(RedisConfig::new(server.url())).expect("backend"));
    let raw = redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let mut report = Report::new(&binary.display().to_string(), seed());
    for (index, (name, config)) in walk::configurations().into_iter().enumerate() {
        let model = Arc::new(LeaseModel::new(config.clone()));
        let at_once = AT_ONCE * if config.waiting() { 2 } else { 1 };
        let gate = Arc::new(Semaphore::new(at_once));
        let mut traces = tokio::task::JoinSet::new();
        let started = std::time::Instant::now();
        for trace in 0..traces_of(&config) {
            let permit = Arc::clone(&gate).acquire_owned().await.expect("gate");
            let backend = Backend::Server {
                backend: Arc::clone(&backend),
                raw: raw.clone(),
            };
            let (model, config) = (Arc::clone(&model), config.clone());
            let id = (index as u64) << 32 | trace;
            traces.spawn(async move {
                let mut code = Code::new(backend, &config, id, tick_of(&config));
                let outcome = replay::replay(&model, &mut code, trace_seed(index, trace)).await;
                drop(permit);
                outcome
            });
        }
        while let Some(outcome) = traces.join_next().await {
            match outcome.expect("trace task") {
                Ok(explored) => report.add(name, explored),
                Err(e) => panic!("{}, {name}: {e}", binary.display()),
            }
        }
        report.took(name, started.elapsed());
    }
    report.print();
    report.assert_few_spoiled();
    // Past the harness's capture, as the report: on Valkey, renewals and releases took the
    // server's own commands; elsewhere the scripts.
    let (set, delifeq) = (server.calls_of("set"), server.calls_of("delifeq"));
    let _ = writeln!(
        std::io::stderr(),
        "  server commands: DELIFEQ {delifeq}, SET {set} (scripts' included)"
    );
}
