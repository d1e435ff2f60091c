//! `leasehold inspect`: is the resource held, by whom, for how long, under which fencing
//! token.

use std::time::Duration;

use clap::Args;
use leasehold::{HolderLabel, LeaseKeys, LeaseRequest};

use crate::holders::{self, Holder};
use crate::{Common, config, fail, status, watch};

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    common: Common,
    /// Print one JSON object: {"held":true,"key":…,"remaining_ms":…,"fencing_token":…,
    /// "holder":…,"waiting":…} (holder null when the lease carries no label) or
    /// {"held":false,"key":…,"waiting":…} — with "lock_delay_ms", "fencing_token" and
    /// "holder" of the ended lease while a lock-delay refuses holders. `key` is the lease's
    /// Redis key: deleting it takes the lease (or the lock-delay) away. "waiting" is the
    /// number of entries in the lease's line (null when it could not be read).
    #[arg(long)]
    json: bool,
    /// Inspect the counted lease of N permits (1 ..= 64), as `run --permits N` holds it:
    /// how many of its slots are held, and each slot's holder, remaining time and token.
    /// With --json: {"permits":N,"held":<slots held>,"key":…,"waiting":…,"slots":[<one
    /// object as above per slot, with "slot":i, without "waiting">]} [default: 1, the plain
    /// lease].
    #[arg(long, value_name = "N", value_parser = config::parse_permits, allow_negative_numbers = true)]
    permits: Option<u16>,
    /// Keep watching: print a line (with --json, an object) each time the holder changes
    /// — acquired, released, expired, taken over — or the number waiting in its line does,
    /// until interrupted (exit 0). A release
    /// or acquisition shows within a round trip, an expiry at its time, a key deleted from
    /// outside within a second. Plain leases only.
    #[arg(long)]
    watch: bool,
}

pub(crate) async fn inspect(args: InspectArgs) -> u8 {
    let (client, server) = match args.common.client(None) {
        Ok(c) => c,
        Err(message) => return fail(message),
    };
    let resource = match args.common.resource() {
        Ok(r) => r,
        Err(message) => return fail(message),
    };
    let permits = args.permits.unwrap_or(1);
    if args.watch && permits > 1 {
        return fail("--watch follows a plain lease; give --permits only without it");
    }
    // A fresh attempt never holds the lease, so a holder shows as held by another.
    let attempt = match client.new_attempt("inspect") {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let request = LeaseRequest::builder(args.common.purpose().clone(), resource, attempt)
        .permits(u32::from(permits))
        .build();
    let request = match request {
        Ok(request) => request,
        Err(e) => return fail(config::option_error(&e)),
    };
    if args.watch {
        return watch::watch(&client, &server, &request, args.json).await;
    }
    let (held, waiting) = match holders::read_line(&client, &server, &request).await {
        Ok(read) => read,
        Err(message) => return fail(message),
    };
    let key = client
        .keys(args.common.purpose(), &resource)
        .counted(permits);
    let count = print(args.json, &key, &held, waiting);
    if count > 0 { 0 } else { status::ABSENT }
}

/// Prints what the read saw (`--json` or text) and returns how many slots are held.
fn print(json_out: bool, key: &LeaseKeys, held: &[Option<Holder>], waiting: Option<u64>) -> usize {
    let permits = key.permits();
    let count = held.iter().flatten().filter(|h| !h.delayed).count();
    let first = held.first().and_then(Option::as_ref);
    match (json_out, permits) {
        (true, 1) => {
            let mut value = json(key.lease(), first);
            value["waiting"] = waiting.into();
            println!("{value}");
        }
        (true, _) => {
            let slots: Vec<_> = (0u16..)
                .zip(held)
                .map(|(slot, held)| {
                    let mut value = json(key.for_slot(slot).lease(), held.as_ref());
                    value["slot"] = slot.into();
                    value
                })
                .collect();
            let value = serde_json::json!({
                "permits": permits,
                "held": count,
                "key": key.lease(),
                "waiting": waiting,
                "slots": slots,
            });
            println!("{value}");
        }
        (false, 1) => text(first),
        (false, _) => {
            println!("held: {count} of {permits}");
            // One line per slot held or in its lock-delay:
            // `slot 2: fencing_token 17, remaining 29s, holder h:1`.
            for (slot, held) in held.iter().enumerate() {
                if let Some(held) = held {
                    let time = humantime::format_duration(held.remaining);
                    let token = held.token;
                    let mut line = if held.delayed {
                        format!("slot {slot}: lock-delay {time}, after fencing_token {token}")
                    } else {
                        format!("slot {slot}: fencing_token {token}, remaining {time}")
                    };
                    if let Some(holder) = &held.holder {
                        line.push_str(&format!(", holder {holder}"));
                    }
                    println!("{line}");
                }
            }
        }
    }
    if !json_out {
        println!("{}", waiting_line(waiting));
    }
    count
}

/// The text's last line: `waiting: 3` — the entries in the lease's line.
fn waiting_line(waiting: Option<u64>) -> String {
    waiting.map_or_else(
        || "waiting: unknown (the line could not be read)".to_owned(),
        |n| format!("waiting: {n}"),
    )
}

/// One lease's (or slot's) object of `--json`.
fn json(key: &str, held: Option<&Holder>) -> serde_json::Value {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match held {
        Some(h) if h.delayed => serde_json::json!({
            "held": false,
            "key": key,
            "lock_delay_ms": millis(h.remaining),
            "fencing_token": h.token.get(),
            "holder": h.holder.as_ref().map(HolderLabel::as_str),
        }),
        Some(h) => serde_json::json!({
            "held": true,
            "key": key,
            "remaining_ms": millis(h.remaining),
            "fencing_token": h.token.get(),
            "holder": h.holder.as_ref().map(HolderLabel::as_str),
        }),
        None => serde_json::json!({ "held": false, "key": key }),
    }
}

/// One lease's (or slot's) lines of text.
fn text(held: Option<&Holder>) {
    match held {
        Some(h) if h.delayed => {
            println!("held: no");
            println!(
                "lock-delay: {} (the last lease ended without a release)\nfencing_token: {}",
                humantime::format_duration(h.remaining),
                h.token
            );
            if let Some(holder) = &h.holder {
                println!("holder: {holder}");
            }
        }
        Some(h) => {
            println!("held: yes");
            if let Some(holder) = &h.holder {
                println!("holder: {holder}");
            }
            println!(
                "remaining: {}\nfencing_token: {}",
                humantime::format_duration(h.remaining),
                h.token
            );
        }
        None => println!("held: no"),
    }
}
