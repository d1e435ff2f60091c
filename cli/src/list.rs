//! `leasehold list`: the leases held in a namespace — purpose, resource digest, holder,
//! fencing token and remaining time. What an operator asks first during an incident.

use std::time::Duration;

use clap::Args;
use leasehold::{HolderLabel, ListCoverage, ListOutcome, Purpose};

use crate::config::{self, Connection};
use crate::fail;

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    connection: Connection,
    /// Only the leases for this purpose [default: every purpose].
    #[arg(long, value_parser = config::parse_purpose)]
    purpose: Option<Purpose>,
    /// List at most this many leases (1 ..= 1000000); a line on stderr says when more
    /// were held.
    #[arg(long, default_value_t = 10_000, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    limit: u32,
    /// Give up after this long (1ms ..= 1h) and print what was read by then, with a line
    /// on stderr saying the listing is incomplete. Each Redis command is bounded besides
    /// by LEASEHOLD_COMMAND_TIMEOUT.
    #[arg(long, default_value = "10s", value_name = "DURATION",
          value_parser = config::parse_list_budget)]
    budget: Duration,
    /// Print one JSON object: {"leases":[{"purpose":…,"resource":"sha256:…",
    /// "fencing_token":…,"remaining_ms":…,"holder":…},…],"truncated":false,
    /// "incomplete":false} ("truncated": more than --limit held; "incomplete": --budget ran
    /// out); a counted lease's slot (`run --permits`) also has "slot" and "permits".
    #[arg(long)]
    json: bool,
}

pub(crate) async fn list(args: ListArgs) -> u8 {
    let (client, server) = match args.connection.client(None) {
        Ok(c) => c,
        Err(message) => return fail(message),
    };
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let listed = client.list_within(args.purpose.as_ref(), limit, args.budget);
    let (leases, coverage) = match listed.await {
        Ok(ListOutcome::Listed { leases, coverage }) => (leases, coverage),
        Ok(ListOutcome::Unavailable { detail }) => return fail(server.explain(&detail)),
        Err(e) => return fail(e),
    };
    let truncated = coverage == ListCoverage::StoppedAtLimit;
    let incomplete = coverage == ListCoverage::OutOfBudget;
    if args.json {
        let rows: Vec<_> = leases
            .iter()
            .map(|l| {
                let mut row = serde_json::json!({
                    "purpose": l.purpose.as_str(),
                    "resource": l.resource.to_string(),
                    "fencing_token": l.token.get(),
                    "remaining_ms": u64::try_from(l.remaining.as_millis()).unwrap_or(u64::MAX),
                    "holder": l.holder.as_ref().map(HolderLabel::as_str),
                });
                if let Some(slot) = l.slot {
                    row["slot"] = slot.slot.into();
                    row["permits"] = slot.permits.into();
                }
                row
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "leases": rows, "truncated": truncated, "incomplete": incomplete })
        );
    } else {
        for l in &leases {
            // A counted lease's slot says which: ` slot=2/4`.
            let slot = l
                .slot
                .map(|s| format!(" slot={}/{}", s.slot, s.permits))
                .unwrap_or_default();
            println!(
                "{} {}{slot} holder={} fencing_token={} remaining={}",
                l.purpose,
                l.resource,
                l.holder.as_ref().map_or("-", HolderLabel::as_str),
                l.token,
                humantime::format_duration(l.remaining)
            );
        }
    }
    if truncated {
        say!("more than {limit} leases are held; raise --limit to see them all");
    }
    if incomplete {
        let budget = humantime::format_duration(args.budget);
        say!(
            "incomplete: the listing's budget of {budget} ran out after {} leases; others \
             may be held (raise --budget, or list one --purpose)",
            leases.len()
        );
    }
    0
}
