//! Micro benchmarks of the pure parts and of one cycle on `MemoryBackend` (criterion).
//!
//! ```sh
//! cargo bench -p leasehold-benches --bench micro            # full criterion run
//! cargo bench -p leasehold-benches --bench micro -- --quick  # criterion's quick mode
//! ```
//!
//! Reply decoding is crate-private; it is reached through the hidden `fuzzing` feature that
//! the crate's own dev-dependency turns on (`leasehold::fuzzing`, the decoders
//! unchanged), from the bytes Redis sends for one script call of sixteen refusals.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use leasehold::fuzzing as decode;
use leasehold::{
    AcquireOutcome, Attempt, LeaseClient, LeaseRequest, LeaseSettings, MemoryBackend, OperationId,
    Purpose, ReleaseOutcome, RenewOutcome, ResourceDigest,
};

fn pure(c: &mut Criterion) {
    let mut group = c.benchmark_group("pure");
    let id = [0x5au8; 32];
    group.bench_function("ResourceDigest::of/32B", |b| {
        b.iter(|| ResourceDigest::of(black_box(&id)));
    });

    let text = ResourceDigest::of(b"tenant-42").to_string();
    group.bench_function("ResourceDigest::parse", |b| {
        b.iter(|| ResourceDigest::parse(black_box(&text)).expect("valid digest"));
    });

    group.bench_function("OperationId::new", |b| {
        b.iter(|| OperationId::new(black_box("nightly-2026-12-02")).expect("valid id"));
    });

    let operation = OperationId::new("nightly-2026-12-02").expect("valid id");
    group.bench_function("Attempt::new (OS entropy)", |b| {
        b.iter(|| Attempt::new(black_box(operation.clone())).expect("entropy"));
    });

    // Only `builder(...).build()` is timed; the purpose and attempt it consumes are cloned
    // in the untimed setup.
    let purpose = Purpose::new("reports").expect("valid purpose");
    let digest = ResourceDigest::of(b"tenant-42");
    let attempt = Attempt::new(operation.clone()).expect("entropy");
    group.bench_function("LeaseRequest::builder().build()", |b| {
        b.iter_batched(
            || (purpose.clone(), attempt.clone()),
            |(purpose, attempt)| {
                LeaseRequest::builder(purpose, black_box(digest), attempt)
                    .ttl(Duration::from_secs(30))
                    .wait_timeout(Duration::from_secs(5))
                    .build()
                    .expect("valid request")
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// One acquire → release cycle and one renew on `MemoryBackend`, on a current-thread
/// runtime; each measurement runs its iterations inside one `block_on`.
fn memory_backend(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let client =
        LeaseClient::new(MemoryBackend::new(), LeaseSettings::default()).expect("valid settings");
    let request = |resource: &str| {
        LeaseRequest::builder(
            Purpose::new("bench").expect("valid purpose"),
            ResourceDigest::of(resource),
            client.new_attempt("bench").expect("entropy"),
        )
        .ttl(Duration::from_secs(30))
        .build()
        .expect("valid request")
    };
    let mut group = c.benchmark_group("memory_backend");

    // The same request each time: after its release the key is absent, so it is ACQUIRED
    // again (with a new fencing token).
    let cycle = request("cycle");
    group.bench_function("try_acquire+release", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    match client.try_acquire(black_box(&cycle)).await {
                        Ok(AcquireOutcome::Acquired(mut lease)) => {
                            assert_eq!(lease.release().await, ReleaseOutcome::Released);
                        }
                        other => panic!("acquire was {other:?}"),
                    }
                }
                start.elapsed()
            })
        });
    });

    let held = request("renewed");
    let mut lease = match runtime.block_on(client.try_acquire(&held)) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("acquire was {other:?}"),
    };
    group.bench_function("handle.renew", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    match lease.renew().await {
                        RenewOutcome::Renewed { .. } => {}
                        other => panic!("renew was {other:?}"),
                    }
                }
                start.elapsed()
            })
        });
    });
    group.finish();
    assert_eq!(runtime.block_on(lease.release()), ReleaseOutcome::Released);
}

/// One script call's reply as Redis sends it (call id 7, sixteen refusals), from bytes to
/// typed replies: what the backend does for every call, per item.
fn reply_decoding(c: &mut Criterion) {
    let mut wire = b"*17\r\n$1\r\n7\r\n".to_vec();
    for _ in 0..16 {
        wire.extend_from_slice(b"$15\r\nCONTENDED 29871\r\n");
    }
    let mut group = c.benchmark_group("reply");
    group.bench_function("16 refusals: RESP bytes → typed replies", |b| {
        b.iter(|| {
            let value = redis::parse_redis_value(black_box(&wire)).expect("valid RESP");
            let items = decode::batch(value, 7, 16).expect("16 items for call 7");
            for item in items {
                black_box(decode::acquire(item).expect("an acquire reply"));
            }
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = pure, memory_backend, reply_decoding
}
criterion_main!(benches);
