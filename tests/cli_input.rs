//! `leasehold run` and `--help` as a person typing them sees them: bad input is refused
//! with one line naming the option (or variable) before anything reaches Redis, and the
//! help lists every option and exit status.

mod common;

use common::RedisServer;
use common::cli::*;

#[test]
fn bad_input_exits_125_with_one_line_naming_the_option_and_touches_nothing_in_redis() {
    let server = RedisServer::start();
    let dir = TempDir::new("bad-input");
    let url = server.url();
    // (arguments after `leasehold run`, split at spaces; extra environment; what the line
    // must name)
    let cases = [
        ("--resource x --ttl 0 -- true", None, "--ttl"),
        ("--resource x --ttl abc -- true", None, "--ttl"),
        ("--resource x --ttl 50ms -- true", None, "--ttl"),
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
            "--resource x --replicas 1 --replica-wait 11s -- true",
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
        // The default 1 s wait does not fit a 1 s lease's renewals.
        (
            "--resource x --ttl 1s --replicas 1 -- true",
            None,
            "--replica-wait",
        ),
        (
            "--resource x --ttl 2s --replicas 1 --replica-wait 900ms -- true",
            None,
            "--replica-wait",
        ),
        // Every duration is bounded at parse time: no overflow later, no panic.
        (
            "--resource x --grace 580000000000y -- true",
            None,
            "--grace",
        ),
        ("--resource x --grace 2h -- true", None, "--grace"),
        (
            "--resource x --kill-after 580000000000y -- true",
            None,
            "--kill-after",
        ),
        ("--resource x --wait 2h -- true", None, "--wait"),
        (
            "--resource x --renew-every 580000000000y -- true",
            None,
            "--renew-every",
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
    server.reset_stats();
    for (i, (args, env, names)) in cases.into_iter().enumerate() {
        let args: Vec<&str> = args.split(' ').collect();
        let mut cmd = bare();
        cmd.arg("run");
        if !args.contains(&"--redis") && env.is_none_or(|(var, _)| var != "LEASEHOLD_REDIS_URL") {
            cmd.args(["--redis", &url]);
        }
        cmd.args(&args).envs(env);
        let done = finish(cmd, &dir, &format!("case{i}"));
        let what = format!("run {args:?} {env:?}");
        done.assert_code(125, &what);
        let lines = done.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: stderr {:?}", done.stderr);
        assert!(
            names_option(lines[0], names),
            "{what}: the line does not name {names}: {:?}",
            lines[0]
        );
        assert!(done.stdout.is_empty(), "{what}: stdout {:?}", done.stdout);
        assert_eq!(
            server.command_calls(),
            0,
            "{what}: leasehold sent commands to redis"
        );
        let size: i64 = server.query(&["DBSIZE"]);
        assert_eq!(
            size,
            0,
            "{what}: redis is not empty: {:?}",
            all_keys(&server)
        );
        server.reset_stats();
    }
}

/// Whether an error line names `option`. The library's relation checks name parameters in
/// their config spelling (`renew_every`, `drift_budget`), which is accepted for the option;
/// `--` (the separator) must appear other than in the `--help` hint.
fn names_option(line: &str, option: &str) -> bool {
    let normal = line.replace('_', "-").to_ascii_lowercase();
    match option {
        // A variable is named first, as itself.
        var if var.starts_with("LEASEHOLD_") => line.starts_with(&format!("leasehold: {var}")),
        "--" => normal.replace("--help", "").contains("--"),
        "--redis" => normal.contains("--redis") || normal.contains("redis url"),
        "--renew-every" => normal.contains("renew-every"),
        "drift" => normal.contains("ttl") && normal.contains("drift"),
        _ => normal.contains(option),
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
        "LEASEHOLD_NAMESPACE",
        "LEASEHOLD_RESOURCE",
        "--replicas",
        "--replica-wait",
        "--require-replicas",
        "--operation-id",
    ] {
        assert!(
            help.stdout.contains(option),
            "--help does not mention {option}:\n{}",
            help.stdout
        );
    }
}
