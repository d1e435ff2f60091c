//! `leasehold inspect --watch`: the CLI face of [`LeaseClient::observe`] — one line (or one
//! JSON object) on stdout each time the holder changes or the number waiting in its line
//! does (as the observer reads it: at least every second), until interrupted.

use std::time::{Duration, SystemTime};

use leasehold::{HolderLabel, LeaseClient, LeaseRequest, ResourceHolder};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::diagnose::Server;
use crate::fail;
use crate::holders::about;

/// How often the observer reads even without a notice: a key deleted from outside (which
/// publishes nothing) shows within this.
const POLL: Duration = Duration::from_secs(1);

/// Prints each change of holder (or of how many wait) until SIGINT, SIGTERM or SIGHUP
/// (exit 0).
pub(crate) async fn watch(
    client: &LeaseClient,
    server: &Server,
    request: &LeaseRequest,
    json: bool,
) -> u8 {
    let observer = match client.observe(request, POLL) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut changes = observer.watch();
    let mut line = observer.watch_waiting();
    let mut stops = Vec::new();
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        match signal(kind) {
            Ok(s) => stops.push(s),
            Err(e) => return fail(format!("cannot install signal handlers: {e}")),
        }
    }
    let stopped = async {
        let waits = stops.iter_mut().map(|s| Box::pin(s.recv()));
        futures_util::future::select_all(waits).await;
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            () = &mut stopped => return 0,
            changed = changes.changed() => {
                if changed.is_err() {
                    return fail("the lease observer stopped");
                }
                let seen = changes.borrow_and_update().clone();
                print(&seen, *line.borrow_and_update(), server, json);
            }
            changed = line.changed() => {
                if changed.is_err() {
                    return fail("the lease observer stopped");
                }
                let waiting = *line.borrow_and_update();
                print(&changes.borrow_and_update().clone(), waiting, server, json);
            }
        }
    }
}

/// One change, as a line or a JSON object, with how many wait (`None`: not known).
fn print(seen: &ResourceHolder, waiting: Option<u64>, server: &Server, json: bool) {
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    if json {
        if let Some(mut value) = as_json(seen, server, &now) {
            value["waiting"] = waiting.into();
            println!("{value}");
        }
    } else if let Some(line) = as_line(seen, server) {
        match waiting {
            Some(n) => println!("{now} {line}, waiting {n}"),
            None => println!("{now} {line}"),
        }
    }
}

fn remaining(at: Instant) -> Duration {
    at.saturating_duration_since(Instant::now())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The line for one change; none before the first read.
fn as_line(seen: &ResourceHolder, server: &Server) -> Option<String> {
    let label = |holder: &Option<HolderLabel>| {
        holder
            .as_ref()
            .map_or_else(String::new, |h| format!(", holder {h}"))
    };
    Some(match seen {
        ResourceHolder::Unknown { detail: None } => return None,
        ResourceHolder::Unknown { detail: Some(d) } => {
            format!("held: unknown ({})", server.explain(d))
        }
        ResourceHolder::Free => "held: no".to_owned(),
        ResourceHolder::Held {
            token,
            holder,
            expires_at,
        } => format!(
            "held: yes{}, fencing_token {token}, remaining {}",
            label(holder),
            about(remaining(*expires_at))
        ),
        // The lease ended unreleased: nobody holds it, and nobody can take it until the
        // delay runs out.
        ResourceHolder::LockDelayed {
            token,
            holder,
            free_at,
        } => format!(
            "held: no, lock-delay {} (its last holder ended without a release{}, \
             fencing_token {token})",
            about(remaining(*free_at)),
            label(holder)
        ),
        // A state a later version of the library adds: said as unknown.
        _ => "held: unknown".to_owned(),
    })
}

/// The JSON object for one change; none before the first read.
fn as_json(seen: &ResourceHolder, server: &Server, now: &str) -> Option<serde_json::Value> {
    Some(match seen {
        ResourceHolder::Unknown { detail: None } => return None,
        ResourceHolder::Unknown { detail: Some(d) } => {
            serde_json::json!({ "time": now, "held": null, "error": server.explain(d) })
        }
        ResourceHolder::Free => serde_json::json!({ "time": now, "held": false }),
        ResourceHolder::Held {
            token,
            holder,
            expires_at,
        } => serde_json::json!({
            "time": now,
            "held": true,
            "holder": holder.as_ref().map(HolderLabel::as_str),
            "fencing_token": token.get(),
            "remaining_ms": millis(remaining(*expires_at)),
        }),
        ResourceHolder::LockDelayed {
            token,
            holder,
            free_at,
        } => serde_json::json!({
            "time": now,
            "held": false,
            "holder": holder.as_ref().map(HolderLabel::as_str),
            "fencing_token": token.get(),
            "lock_delay_ms": millis(remaining(*free_at)),
        }),
        _ => serde_json::json!({ "time": now, "held": null }),
    })
}
