//! `leasehold run` and `--help` as a person typing them sees them: bad input is refused
//! with one line naming the option (or variable) before anything reaches Redis, and the
//! help lists every option and exit status.

mod common;

use common::RedisServer;
use common::cli::*;

/// Arguments after `leasehold run` (split at spaces), a variable to set, and what the
/// line must name.
type BadInput = (
    &'static str,
    Option<(&'static str, &'static str)>,
    &'static str,
);

const BAD_INPUT: &[BadInput] = &[
    ("--resource x --ttl abc -- true", None, "--ttl"),
    ("--resource x true", None, "--"),
    ("-- true", None, "--resource"),
    ("--resource x --bogus -- true", None, "--bogus"),
    (
        "--resource x --ttl 1s --renew-every 2s -- true",
        None,
        "--renew-every",
    ),
    ("--resource x --purpose Bad -- true", None, "--purpose"),
    ("--resource x --holder wéb -- true", None, "--holder"),
    (
        "--resource x --holder xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx -- true",
        None,
        "--holder",
    ),
    ("--resource x --redis http://x -- true", None, "--redis"),
    (
        "--resource x --ttl 1s -- true",
        Some(("LEASEHOLD_DRIFT_BUDGET", "2s")),
        "drift",
    ),
    ("--resource x --replicas 0 -- true", None, "--replicas"),
    ("--resource x --replicas 17 -- true", None, "--replicas"),
    ("--resource x --replicas -1 -- true", None, "--replicas"),
    ("--resource x --replicas two -- true", None, "--replicas"),
    (
        "--resource x --replicas 1 --replica-wait soon -- true",
        None,
        "--replica-wait",
    ),
    (
        "--resource x --replicas 1 --replica-wait 0s -- true",
        None,
        "--replica-wait",
    ),
    // Without --replicas there is nothing to wait for or require.
    ("--resource x --replica-wait 1s -- true", None, "--replicas"),
    (
        "--resource x --require-replicas -- true",
        None,
        "--replicas",
    ),
    // Every duration is bounded at parse time: no overflow later, no panic.
    (
        "--resource x --grace 580000000000y -- true",
        None,
        "--grace",
    ),
    (
        "--resource x --kill-after 580000000000y -- true",
        None,
        "--kill-after",
    ),
    (
        "--resource x --renew-every 580000000000y -- true",
        None,
        "--renew-every",
    ),
    // Below the shortest TTL the settings allow (renewing every ttl/3; the harness's
    // 500 ms command timeout is the safety margin): named as --ttl, not as a
    // --renew-every nobody gave.
    ("--resource x --ttl 500ms -- true", None, "--ttl"),
    ("--resource x --signal KILL -- true", None, "--timeout"),
    ("--resource x --timeout 1s -s STOP -- true", None, "-s"),
    ("--resource x -n -w 1s -- true", None, "--no-wait"),
    // URLs: no scheme, a web server's, no host, no port number.
    (
        "--resource x --redis 127.0.0.1:6379 -- true",
        None,
        "redis://127.0.0.1:6379",
    ),
    (
        "--resource x --redis https://db:6379 -- true",
        None,
        "scheme is https://",
    ),
    (
        "--resource x --redis redis://:6379 -- true",
        None,
        "no host",
    ),
    (
        "--resource x --redis redis://db:99999 -- true",
        None,
        "port",
    ),
    // The resource: empty, unreadable, or from an empty variable.
    ("--resource= -- true", None, "--resource"),
    (
        "--resource-file /nonexistent/leasehold-id -- true",
        None,
        "--resource-file",
    ),
    (
        "-- true",
        Some(("LEASEHOLD_RESOURCE", "")),
        "LEASEHOLD_RESOURCE",
    ),
    // A variable's bad value is named as the variable; the flag's as the flag.
    (
        "--resource x -- true",
        Some(("LEASEHOLD_NAMESPACE", "Bad!")),
        "LEASEHOLD_NAMESPACE",
    ),
    ("--resource x --namespace Bad! -- true", None, "--namespace"),
    (
        "--resource x -- true",
        Some(("LEASEHOLD_REDIS_URL", "http://x")),
        "LEASEHOLD_REDIS_URL",
    ),
    (
        "--resource x -- true",
        Some(("LEASEHOLD_RENEW_EVERY", "soon")),
        "LEASEHOLD_RENEW_EVERY",
    ),
];

#[test]
fn bad_input_exits_125_with_one_line_naming_the_option_and_touches_nothing_in_redis() {
    let server = RedisServer::start();
    let dir = TempDir::new("bad-input");
    server.reset_stats();
    for (i, &(args, env, names)) in BAD_INPUT.iter().enumerate() {
        let args: Vec<&str> = std::iter::once("run").chain(args.split(' ')).collect();
        let line = refused(&server, &dir, &format!("case{i}"), &args, env);
        assert!(
            names_option(&line, names),
            "run {args:?} {env:?}: the line does not name {names}: {line:?}"
        );
    }
}

/// What a refused value's line says, as `[VAR=value] arguments => start | words…`: the
/// start follows `leasehold: `, each word is somewhere in the line.
const REFUSED_VALUES: &[&str] = &[
    "run --ttl -1 => --ttl -1: a duration is never negative | 766ms ..= 1h",
    "run --ttl -1s => --ttl -1s: a duration is never negative | 766ms ..= 1h",
    "run -w -5m => --wait -5m: a duration is never negative | 0s ..= 1h",
    "run --grace -1 => --grace -1: a duration is never negative | 0s ..= 1h",
    "run -k -0.5 => --kill-after -0.5: a duration is never negative | 0s ..= 1h",
    "run --timeout -1 => --timeout -1: a duration is never negative | 1ms ..= 30days",
    "run --renew-every -1 => --renew-every -1: a duration is never negative | 10ms ..= 1h",
    "run --lock-delay -1 => --lock-delay -1: a duration is never negative | 1ms ..= 1h",
    "run --replicas 1 --replica-wait -1 => --replica-wait -1: a duration is never \
     negative | 1ms ..= 10s",
    "list --budget -1 => --budget -1: a duration is never negative | 1ms ..= 1h",
    "run --wait 2h => --wait 2h: above the maximum of 1h | give one within 0s ..= 1h",
    "run -w 7200 => --wait 7200: above the maximum of 1h | 0s ..= 1h",
    "run --kill-after 2h => --kill-after 2h: above the maximum of 1h | 0s ..= 1h",
    "run --renew-every 5ms => --renew-every 5ms: below the minimum of 10ms | 10ms ..= 1h",
    "run --lock-delay 2h => --lock-delay 2h: above the maximum of 1h | 1ms ..= 1h",
    "run --timeout 0 => --timeout 0: below the minimum of 1ms | 1ms ..= 30days",
    "list --budget 2h => --budget 2h: above the maximum of 1h | 1ms ..= 1h",
    "run --ttl abc => --ttl abc: not a duration | 766ms ..= 1h with the settings in force",
    // The harness's 500 ms command timeout is the safety margin: 1.5 × 510 ms + 1 ms.
    "run --ttl 0 => --ttl 0s: below the minimum of 766ms | 766ms ..= 1h | --renew-every \
     | LEASEHOLD_COMMAND_TIMEOUT",
    "run --ttl 50ms => --ttl 50ms: below the minimum of 766ms | 766ms ..= 1h",
    "LEASEHOLD_COMMAND_TIMEOUT=10ms run --ttl 50ms => --ttl 50ms: below the minimum of \
     100ms | 100ms ..= 1h",
    "run --replicas 1 --ttl 2s --replica-wait 900ms => --replica-wait 900ms: must be less \
     than ttl − drift budget − safety margin − renewal period (824ms) | or a longer --ttl",
    "run --replicas 1 --ttl 1s => --replica-wait 1s (the default): | or a longer --ttl",
    "LEASEHOLD_RENEW_EVERY=2h run => LEASEHOLD_RENEW_EVERY=2h: above the maximum of 1h \
     | 10ms ..= 1h",
    "LEASEHOLD_DRIFT_BUDGET=-1s run => LEASEHOLD_DRIFT_BUDGET=-1s: a duration is never \
     negative | 0s ..= 1m",
    "LEASEHOLD_SAFETY_MARGIN=10ms run => LEASEHOLD_SAFETY_MARGIN=10ms: must be at least \
     the command timeout (500ms) | or a shorter LEASEHOLD_COMMAND_TIMEOUT",
    "run --redis redis://ops:hunter2@[::1:6379 => --redis redis://ops:***@[::1:6379: an \
     IPv6 host goes in brackets | redis://[::1]:6379",
    "LEASEHOLD_REDIS_URL=redis://ops:hunter2@[::1:6379 run => \
     LEASEHOLD_REDIS_URL=redis://ops:***@[::1:6379: | redis://[::1]:6379",
    "inspect --redis redis://:hunter2@db/x => --redis redis://:***@db/x: not a Redis URL \
     leasehold can read (invalid database number) | redis://[user:password@]host",
];

/// A refused value's line starts with the option (or variable) and the value as given,
/// then says what is wrong and what is accepted: a negative duration is the option's bad
/// value (not a stray option), a bound is named as the option's range (never the library's
/// name for it), the TTL has one minimum (the one the settings in force make), a URL is
/// shown with its password masked.
#[test]
fn a_refused_value_names_its_option_the_value_and_what_is_accepted() {
    let server = RedisServer::start();
    let dir = TempDir::new("refused-values");
    // The library's names, clap's wrapping (`invalid value '2h' for '--wait <DURATION>'`),
    // the redis client's error kind, the password.
    let internal = "wait_timeout kill_after renew_every lock_delay replica_wait list_budget \
                    safety_margin command_timeout drift_budget '-- InvalidClientConfig hunter2";
    for (i, case) in REFUSED_VALUES.iter().enumerate() {
        let (given, expected) = case.split_once(" => ").expect("a case has =>");
        let mut words: Vec<&str> = given.split(' ').collect();
        let env = words[0]
            .starts_with("LEASEHOLD_")
            .then(|| words.remove(0).split_once('='))
            .flatten();
        let needs = ["--resource", "x", "--", "true"];
        if words[0] == "run" {
            words.extend(needs);
        } else if words[0] == "inspect" {
            words.extend(&needs[..2]);
        }
        let line = refused(&server, &dir, &format!("value{i}"), &words, env);
        let mut expected = expected.split(" | ");
        let start = expected.next().unwrap_or_default();
        assert!(
            line.starts_with(&format!("leasehold: {start}")),
            "{given}: {line:?} does not start with {start:?}"
        );
        for want in expected {
            assert!(
                line.contains(want),
                "{given}: {line:?} does not say {want:?}"
            );
        }
        for word in internal.split_whitespace() {
            assert!(!line.contains(word), "{given}: {line:?} says {word:?}");
        }
        assert!(line.matches("minimum of").count() <= 1, "{given}: {line:?}");
    }
}

/// Whether an error line names `option`: a flag in its own spelling (never the library's
/// `renew_every`), a variable first; `--` (the separator) other than in the `--help` hint.
fn names_option(line: &str, option: &str) -> bool {
    match option {
        var if var.starts_with("LEASEHOLD_") => line.starts_with(&format!("leasehold: {var}")),
        "--" => line.replace("--help", "").contains("--"),
        "--ttl" => line.contains("--ttl") && !line.contains("renew-every 1"),
        "drift" => line.contains("--ttl") && line.contains("drift"),
        _ => line.contains(option),
    }
}

#[test]
fn an_inherited_slot_is_not_passed_on() {
    let server = RedisServer::start();
    let dir = TempDir::new("slot");
    let show = ["--", "sh", "-c", r#"echo "slot=${LEASEHOLD_SLOT-unset}""#];
    let mut plain = run_cmd(&server, "slot");
    plain.args(show).env("LEASEHOLD_SLOT", "3");
    let done = finish(plain, &dir, "plain");
    done.assert_code(0, "a plain lease");
    assert_eq!(done.stdout.trim(), "slot=unset", "{}", done.stdout);
    let mut counted = run_cmd(&server, "slot");
    counted
        .args(["--permits", "2"])
        .args(show)
        .env("LEASEHOLD_SLOT", "3");
    let done = finish(counted, &dir, "counted");
    done.assert_code(0, "a counted lease");
    assert_eq!(done.stdout.trim(), "slot=0", "{}", done.stdout);
}

/// A subcommand that takes no command does not tell its user to put one after `--`.
#[test]
fn subcommands_without_a_command_do_not_speak_of_the_separator() {
    let dir = TempDir::new("no-separator");
    for sub in ["doctor", "inspect", "list"] {
        let mut cmd = bare();
        cmd.args([sub, "--bogus"]);
        let done = finish(cmd, &dir, sub);
        done.assert_code(125, sub);
        let lines = done.stderr_lines();
        assert_eq!(lines.len(), 1, "{sub}: {:?}", done.stderr);
        assert!(lines[0].contains("--bogus"), "{sub}: {:?}", lines[0]);
        assert!(
            !lines[0]
                .replace("--bogus", "")
                .replace("--help", "")
                .contains("--"),
            "{sub}: {:?}",
            lines[0]
        );
    }
}

#[test]
fn run_help_lists_every_exit_status_and_option() {
    let dir = TempDir::new("help");
    let mut cmd = bare();
    cmd.args(["run", "--help"]);
    let help = finish(cmd, &dir, "help");
    help.assert_code(0, "run --help");
    let words: Vec<&str> = help
        .stdout
        .split(|c: char| c.is_whitespace() || c == '/')
        .collect();
    for status in ["75", "124", "125", "126", "127", "128+N"] {
        assert!(
            words.contains(&status),
            "--help does not mention exit status {status}:\n{}",
            help.stdout
        );
    }
    for option in [
        "--redis",
        "--namespace",
        "--purpose",
        "--resource",
        "--holder",
        "--ttl",
        "--wait",
        "--renew-every",
        "--grace",
        "--kill-after",
        "--wait-for-descendants",
        "--resource-file",
        "--redis-file",
        "LEASEHOLD_NAMESPACE",
        "LEASEHOLD_RESOURCE",
        "--replicas",
        "--replica-wait",
        "--require-replicas",
        "--operation-id",
        "--timeout",
        "-w, --wait",
        "-n, --no-wait",
        "-E, --conflict-exit-code",
        "-k, --kill-after",
        "-s, --signal",
        "4096 bytes",
    ] {
        assert!(
            help.stdout.contains(option),
            "--help does not mention {option}:\n{}",
            help.stdout
        );
    }
    // The shortest TTL, as the settings in force make it: the harness's 500 ms command
    // timeout gives 1.5 × (10 ms + 500 ms) = 765 ms, plus 1 ms for the strict inequality.
    assert!(
        help.stdout.contains("766ms ..= 1h"),
        "--help does not state the minimum TTL:\n{}",
        help.stdout
    );
}
