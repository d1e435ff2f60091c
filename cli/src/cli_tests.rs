//! Properties of the command line: any argument vector parses or fails without a panic,
//! and whatever parses is within the bounds the arithmetic after it relies on.

use std::time::Duration;

use clap::Parser as _;
use proptest::prelude::*;

use crate::{Cli, Command};

/// Duration texts around the bounds, with units humantime knows and junk it does not.
fn duration_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            0u64..u64::MAX,
            prop::sample::select(vec!["ns", "ms", "s", "m", "h", "d", "w", "y", ""])
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
        (0u64..7200, Just("s")).prop_map(|(n, unit)| format!("{n}{unit}")),
        // Bare seconds, as flock(1) and timeout(1) take them.
        (0u64..u64::MAX, 0u32..1_000_000).prop_map(|(s, f)| format!("{s}.{f}")),
        "[0-9a-z .-]{0,12}",
    ]
}

fn run_args(option: &str, value: &str) -> Vec<String> {
    [
        "leasehold",
        "run",
        "--resource",
        "r",
        option,
        value,
        "--",
        "true",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A negative value of every duration option, with a unit or without, is refused as that
/// option's value — one line naming it, the value and the range — not as a stray option.
#[test]
fn a_negative_duration_is_its_options_bad_value() {
    let options = [
        ("run", "--ttl"),
        ("run", "--wait"),
        ("run", "-w"),
        ("run", "--renew-every"),
        ("run", "--grace"),
        ("run", "--kill-after"),
        ("run", "-k"),
        ("run", "--timeout"),
        ("run", "--lock-delay"),
        ("run", "--replica-wait"),
        ("list", "--budget"),
    ];
    for (sub, option) in options {
        for value in ["-1", "-1s", "-0.5", "-1m"] {
            let mut args = vec!["leasehold", sub, "--replicas", "1", option, value];
            if sub == "list" {
                args.drain(2..4);
            } else {
                args.extend(["--", "true"]);
            }
            let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
            let line = match crate::parse(&args) {
                Ok(_) => panic!("{args:?} parsed"),
                Err(e) => crate::parse_error(&e, &args, sub == "run"),
            };
            let long = match option {
                "-w" => "--wait",
                "-k" => "--kill-after",
                long => long,
            };
            assert!(
                line.starts_with(&format!(
                    "{long} {value}: a duration is never negative; give one within "
                )),
                "{args:?}: {line}"
            );
        }
    }
}

proptest! {
    #[test]
    fn every_duration_option_is_bounded_at_parse_time(
        option in prop::sample::select(vec![
            "--ttl", "--wait", "-w", "--renew-every", "--grace", "--kill-after", "-k",
            "--replica-wait", "--timeout",
        ]),
        value in duration_text(),
    ) {
        let mut args = run_args(option, &value);
        if option == "--replica-wait" {
            args.splice(4..4, ["--replicas".to_owned(), "1".to_owned()]);
        }
        if let Ok(Cli { command: Command::Run(run), .. }) = Cli::try_parse_from(&args) {
            let hour = Duration::from_secs(3600);
            for d in [run.grace, run.kill_after, run.ttl].into_iter().flatten() {
                prop_assert!(d <= hour, "{option} {value} parsed to {d:?}");
            }
            if let Some(d) = run.timeout {
                prop_assert!(d <= Duration::from_secs(30 * 24 * 3600), "{option} {value}: {d:?}");
            }
        }
    }

    #[test]
    fn any_argument_vector_parses_or_fails_without_panicking(
        words in prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec![
                    "run", "inspect", "--", "--resource", "--resource-file", "--namespace",
                    "--purpose", "--ttl", "--wait", "--grace", "--kill-after", "--replicas",
                    "--replica-wait", "--require-replicas", "--wait-for-descendants",
                    "--operation-id", "--metrics-addr", "--log-format", "--log-level", "--json",
                    "--redis", "-h", "--version", "-w", "-n", "-E", "-k", "-s", "--signal",
                    "--timeout", "--no-wait", "--watch", "doctor", "KILL", "0.5",
                ]).prop_map(str::to_owned),
                "[ -~]{0,16}",
            ],
            0..12,
        ),
    ) {
        let args = std::iter::once("leasehold".to_owned()).chain(words);
        let _ = Cli::try_parse_from(args);
    }
}
