//! Fenced write: a stale holder's write is refused where the effect lands.
//!
//! A holder is paused past its lease (simulated by letting the lease expire while it
//! "sleeps"); a second holder acquires and writes; the first wakes up and writes with its
//! old token. The target — a Redis hash guarded by a small Lua check, or an in-process
//! store when no Redis is configured — refuses the stale write.
//!
//! ```text
//! cargo run --example fenced_write                                          # in memory
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run --example fenced_write # Redis
//! ```
//!
//! In SQL the same check is one statement:
//!
//! ```sql
//! UPDATE reports SET body = $body, fence = $token
//!  WHERE id = $id AND fence < $token;   -- 0 rows: a newer holder already wrote
//! ```

use std::collections::HashMap;
use std::time::Duration;

use leasehold::{AcquireOutcome, FencingToken, LeaseClient, LeaseRequest, Purpose, ResourceDigest};

/// Accepts a write only if its token is greater than every token it accepted before.
const FENCED_SET: &str = r"
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= fence then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'body', ARGV[2])
return 1
";

enum Target {
    Redis(redis::aio::MultiplexedConnection),
    Memory(HashMap<String, (u64, String)>),
}

impl Target {
    async fn write(&mut self, key: &str, token: FencingToken, body: &str) -> bool {
        match self {
            Target::Redis(conn) => {
                let accepted: redis::RedisResult<i64> = redis::Script::new(FENCED_SET)
                    .key(key)
                    .arg(token.get())
                    .arg(body)
                    .invoke_async(conn)
                    .await;
                matches!(accepted, Ok(1))
            }
            Target::Memory(map) => {
                let entry = map.entry(key.to_owned()).or_insert((0, String::new()));
                if token.get() <= entry.0 {
                    return false;
                }
                *entry = (token.get(), body.to_owned());
                true
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = LeaseClient::from_env_or_memory()?;
    let mut target = match std::env::var(leasehold::REDIS_URL_ENV) {
        Ok(url) => Target::Redis(
            redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?,
        ),
        Err(_) => Target::Memory(HashMap::new()),
    };
    let resource = ResourceDigest::of(b"report/2026-12-02");
    let request = |op: &str| -> Result<LeaseRequest, leasehold::LeaseError> {
        LeaseRequest::builder(Purpose::new("reports")?, resource, client.new_attempt(op)?)
            .ttl(Duration::from_millis(300))
            .wait_timeout(Duration::from_secs(2))
            .build()
    };

    let AcquireOutcome::Acquired(old) = client.acquire(&request("holder-a")?).await? else {
        return Err("holder A did not acquire".into());
    };
    println!("A holds the lease with token {}", old.token());
    let old_token = old.token();
    // A is paused (GC, stopped VM…) and does not renew: its lease expires.
    std::mem::forget(old);
    tokio::time::sleep(Duration::from_millis(400)).await;

    let AcquireOutcome::Acquired(mut new) = client.acquire(&request("holder-b")?).await? else {
        return Err("holder B did not acquire".into());
    };
    println!("B holds the lease with token {}", new.token());
    let ok = target.write("report", new.token(), "written by B").await;
    println!("B writes with token {}: {}", new.token(), verdict(ok));

    // A wakes up, still believing it holds the lease, and writes.
    let stale = target.write("report", old_token, "written by A").await;
    println!("A writes with token {old_token}: {}", verdict(stale));
    assert!(ok && !stale, "the fence must refuse the stale write");

    let _ = new.release().await;
    Ok(())
}

fn verdict(accepted: bool) -> &'static str {
    if accepted {
        "accepted"
    } else {
        "refused (stale token)"
    }
}
