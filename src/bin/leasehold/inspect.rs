//! `leasehold inspect`: is the resource held, by whom, for how long, under which fencing
//! token.

use clap::Args;
use leasehold::{HolderLabel, InspectOutcome};

use crate::{Common, fail, status};

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    common: Common,
    /// Print one JSON object: {"held":true,"key":…,"remaining_ms":…,"fencing_token":…,
    /// "holder":…} (holder null when the lease carries no label) or {"held":false,"key":…}.
    /// `key` is the lease's Redis key: deleting it takes the lease away from its holder.
    #[arg(long)]
    json: bool,
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
    // A fresh attempt never holds the lease, so a holder shows as held by another.
    let attempt = match client.new_attempt("inspect") {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let outcome = client
        .inspect(args.common.purpose(), &resource, &attempt)
        .await;
    let held = match outcome {
        InspectOutcome::HeldByAttempt {
            remaining,
            token,
            holder,
        }
        | InspectOutcome::HeldByOther {
            remaining,
            token,
            holder,
        } => Some((remaining, token, holder)),
        InspectOutcome::Absent => None,
        InspectOutcome::Unavailable { detail } => return fail(server.explain(&detail)),
        InspectOutcome::Indeterminate { detail } => {
            return fail(format!("no readable reply: {}", server.explain(&detail)));
        }
    };
    if args.json {
        let key = client.keys(args.common.purpose(), &resource).lease;
        let value = match held {
            Some((remaining, token, ref holder)) => serde_json::json!({
                "held": true,
                "key": key,
                "remaining_ms": u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                "fencing_token": token.get(),
                "holder": holder.as_ref().map(HolderLabel::as_str),
            }),
            None => serde_json::json!({ "held": false, "key": key }),
        };
        println!("{value}");
    } else {
        match held {
            Some((remaining, token, ref holder)) => {
                println!("held: yes");
                if let Some(holder) = holder {
                    println!("holder: {holder}");
                }
                println!(
                    "remaining: {}\nfencing_token: {token}",
                    humantime::format_duration(remaining)
                );
            }
            None => println!("held: no"),
        }
    }
    if held.is_some() { 0 } else { status::ABSENT }
}
