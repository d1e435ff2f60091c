//! H: a held lease handed to a waiting acquirer — release, notice, acquisition — against
//! the same handoff done with raw redis.

use super::*;

/// H: holder holds, a waiter blocks in `acquire`, holder releases; time to the waiter's
/// `Acquired`.
pub(crate) async fn handoff(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    n: usize,
    rtt_p50_us: f64,
    cold_rtt_p50_us: f64,
) -> Row {
    let wait = Duration::from_secs(5);
    let mut samples = Samples::default();
    let mut releases = Samples::default();
    let cpu = CpuMeter::start(info).await;
    for i in 0..n {
        let key = format!("{}:h:{i}", env.run);
        let holder_req = request(client, &key, LOCK_TTL, Duration::ZERO);
        let mut holder = match client
            .try_acquire(&holder_req)
            .await
            .expect("valid request")
        {
            AcquireOutcome::Acquired(lease) => lease,
            other => panic!("H: holder's try_acquire was {} ({other:?})", other.as_str()),
        };
        let retries_before = PROBES.contended_retries.load(Ordering::SeqCst);
        let waiter_req = request(client, &key, LOCK_TTL, wait);
        let waiter_client = client.clone();
        let waiter = tokio::spawn(async move {
            let outcome = waiter_client.acquire(&waiter_req).await;
            (outcome, Instant::now())
        });
        // Blocked: it was refused before and after subscribing to release notices.
        let blocked_by = Instant::now() + Duration::from_secs(2);
        while PROBES.contended_retries.load(Ordering::SeqCst) < retries_before + 2 {
            assert!(Instant::now() < blocked_by, "H: the waiter never blocked");
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released_at = Instant::now();
        let released = holder.release().await;
        releases.push(released_at.elapsed());
        assert_eq!(released, ReleaseOutcome::Released, "H: holder's release");
        let (outcome, acquired_at) = waiter.await.expect("H waiter task");
        match outcome.expect("valid request") {
            AcquireOutcome::Acquired(mut lease) => {
                samples.push(acquired_at - released_at);
                assert_eq!(
                    lease.release().await,
                    ReleaseOutcome::Released,
                    "H: waiter's release"
                );
            }
            other => panic!("H: waiter's acquire was {} ({other:?})", other.as_str()),
        }
    }
    let used = cpu.finish(info).await;
    handoff_row(
        env,
        "H",
        samples,
        releases,
        (rtt_p50_us, cold_rtt_p50_us),
        &used,
    )
}

pub(crate) fn handoff_row(
    env: &Env,
    workload: &str,
    mut samples: Samples,
    mut releases: Samples,
    (rtt_p50_us, cold_rtt_p50_us): (f64, f64),
    used: &Used,
) -> Row {
    let total = samples.total().as_secs_f64();
    let n = samples.0.len();
    let (p50, p99) = samples.p50_p99();
    let (release_p50, _) = releases.p50_p99();
    env.row(
        workload,
        n as f64 / total,
        (p50, p99),
        ("ratio_to_rtt", ratio(p50, rtt_p50_us)),
        vec![
            ("handoffs", n.to_string()),
            ("rtt_p50_us", format!("{rtt_p50_us:.1}")),
            ("p99_ratio_to_rtt", format!("{:.2}", p99 / rtt_p50_us)),
            ("cold_rtt_p50_us", format!("{cold_rtt_p50_us:.1}")),
            ("ratio_to_cold_rtt", format!("{:.2}", p50 / cold_rtt_p50_us)),
            ("release_call_p50_us", format!("{release_p50:.1}")),
            ("bg_cores", used.bg_cores()),
        ],
    )
}

/// The floor of H: the waiter is subscribed to a channel and was refused by `SET NX`; the
/// holder's release is one script (owner-checked `DEL` + `PUBLISH`); on the message the
/// waiter sends `SET NX` again. Timed from just before the holder's release is sent to the
/// waiter's `OK`.
pub(crate) async fn handoff_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    n: usize,
    rtt_p50_us: f64,
    cold_rtt_p50_us: f64,
) -> Row {
    let release = Arc::new(redis::Script::new(FLOOR_RELEASE_PUBLISH_LUA));
    let client = redis::Client::open(env.url.as_str()).expect("redis url");
    let mut samples = Samples::default();
    let mut releases = Samples::default();
    let cpu = CpuMeter::start(info).await;
    for i in 0..n {
        let key = format!("floor:{}:h:{i}", env.run);
        let channel = format!("{key}:released");
        let mut holder = floor.clone();
        let holder_token = holder.token();
        assert!(
            holder.try_lock(&key, &holder_token).await,
            "floor-H: holder refused"
        );
        let mut pubsub = client.get_async_pubsub().await.expect("floor-H: pubsub");
        pubsub
            .subscribe(&channel)
            .await
            .expect("floor-H: SUBSCRIBE");
        let (blocked_tx, blocked_rx) = tokio::sync::oneshot::channel();
        let mut waiter = floor.clone();
        let waiter_key = key.clone();
        let waiter_task = tokio::spawn(async move {
            let token = waiter.token();
            let mut messages = pubsub.into_on_message();
            assert!(
                !waiter.try_lock(&waiter_key, &token).await,
                "floor-H: waiter got a held lock"
            );
            let _ = blocked_tx.send(());
            loop {
                messages.next().await.expect("floor-H: release notice");
                if waiter.try_lock(&waiter_key, &token).await {
                    return (Instant::now(), waiter, token);
                }
            }
        });
        blocked_rx.await.expect("floor-H: waiter blocked");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released_at = Instant::now();
        let deleted: i64 = release
            .key(&key)
            .arg(&holder_token)
            .arg(&channel)
            .invoke_async(&mut holder.con)
            .await
            .expect("floor-H: release script");
        releases.push(released_at.elapsed());
        assert_eq!(deleted, 1, "floor-H: holder's release deleted nothing");
        let (acquired_at, mut waiter, token) = waiter_task.await.expect("floor-H waiter task");
        samples.push(acquired_at - released_at);
        waiter.unlock(&key, &token).await;
    }
    let used = cpu.finish(info).await;
    handoff_row(
        env,
        "floor-H",
        samples,
        releases,
        (rtt_p50_us, cold_rtt_p50_us),
        &used,
    )
}
