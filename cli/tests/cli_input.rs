//! `leasehold run` and `--help` as a person typing them sees them: bad input is refused
//! with one line naming the option (or variable) before anything reaches Redis, and the
//! help lists every option and exit status.

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt as _;
use std::time::{Duration, Instant};

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
        // Below the shortest TTL the settings allow (renewing every ttl/3; the harness's
        // 500 ms command timeout is the safety margin): named as --ttl, not as a
        // --renew-every nobody gave.
        ("--resource x --ttl 500ms -- true", None, "--ttl"),
        // Bare seconds, as flock(1) and timeout(1) take them, are bounded like the rest.
        ("--resource x -w 7200 -- true", None, "-w"),
        ("--resource x --timeout 0 -- true", None, "--timeout"),
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
        "--ttl" => normal.contains("--ttl") && !normal.contains("renew-every 1"),
        "drift" => normal.contains("ttl") && normal.contains("drift"),
        _ => normal.contains(option),
    }
}

/// Arguments after `run --redis <url>`, a variable to set, and what the line must name.
type UnreadableCase<'a> = (Vec<OsString>, Option<(&'a str, OsString)>, &'a str);

/// What leasehold cannot read as meant — bytes that are not UTF-8 in an option or a
/// variable, a resource file that is not a small regular file — is refused in one line,
/// exit 125, before anything reaches Redis; never taken for unset (another namespace, the
/// default server: another lease).
#[test]
fn unreadable_inputs_are_refused_in_one_line_before_redis() {
    let server = RedisServer::start();
    let dir = TempDir::new("unreadable");
    let fifo = dir.path("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo {fifo:?}");
    let long = dir.path("long");
    fs::write(&long, vec![b'x'; 5000]).expect("write a long file");
    let not_utf8 = || OsString::from_vec(b"web\xff".to_vec());
    let path = |p: &std::path::Path| p.as_os_str().to_owned();
    let cases: Vec<UnreadableCase<'_>> = vec![
        (vec!["--resource".into(), not_utf8()], None, "--resource"),
        (
            vec![
                "--resource".into(),
                "x".into(),
                "--holder".into(),
                not_utf8(),
            ],
            None,
            "--holder",
        ),
        (
            vec![OsString::from_vec(b"--resource=\xff".to_vec())],
            None,
            "--resource",
        ),
        (
            vec![],
            Some(("LEASEHOLD_RESOURCE", not_utf8())),
            "LEASEHOLD_RESOURCE",
        ),
        (
            vec!["--resource".into(), "x".into()],
            Some(("LEASEHOLD_NAMESPACE", not_utf8())),
            "LEASEHOLD_NAMESPACE",
        ),
        (
            vec!["--resource".into(), "x".into()],
            Some(("LEASEHOLD_DRIFT_BUDGET", not_utf8())),
            "LEASEHOLD_DRIFT_BUDGET",
        ),
        (
            vec!["--resource-file".into(), "/dev/zero".into()],
            None,
            "--resource-file",
        ),
        (
            vec!["--resource-file".into(), path(&fifo)],
            None,
            "--resource-file",
        ),
        (
            vec!["--resource-file".into(), path(&long)],
            None,
            "--resource-file",
        ),
        (
            vec!["--resource-file".into(), path(dir.path("").as_path())],
            None,
            "--resource-file",
        ),
    ];
    server.reset_stats();
    for (i, (args, var, names)) in cases.into_iter().enumerate() {
        let mut cmd = bare();
        cmd.args(["run", "--redis", &server.url()]).args(&args);
        if let Some((name, value)) = &var {
            cmd.env(name, value);
        }
        cmd.args(["--", "true"]);
        let started = Instant::now();
        let done = finish(cmd, &dir, &format!("case{i}"));
        let took = started.elapsed();
        let what = format!("run {args:?} {var:?}");
        done.assert_code(125, &what);
        let lines = done.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: stderr {:?}", done.stderr);
        assert!(lines[0].contains(names), "{what}: {:?}", lines[0]);
        assert!(!lines[0].contains("panicked"), "{what}: {:?}", lines[0]);
        // Refused at once: nothing was read to its end (/dev/zero has none).
        assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
        println!("measured: {what} refused in {took:?}");
        assert_eq!(server.command_calls(), 0, "{what}: leasehold sent commands");
        server.reset_stats();
    }
    // A LEASEHOLD_REDIS_URL that is not UTF-8 is refused, not replaced by the default.
    let mut cmd = bare();
    cmd.args(["run", "--resource", "x", "--", "true"])
        .env("LEASEHOLD_REDIS_URL", not_utf8());
    let done = finish(cmd, &dir, "url");
    done.assert_code(125, "a LEASEHOLD_REDIS_URL that is not UTF-8");
    assert!(
        done.stderr.starts_with("leasehold: LEASEHOLD_REDIS_URL"),
        "{}",
        done.stderr
    );
    // The command's own arguments may be any bytes.
    let mut cmd = bare();
    cmd.args(["run", "--redis", &server.url(), "--resource", "x", "--"])
        .args(["sh", "-c", "printf %s \"$1\" | od -An -tx1", "sh"])
        .arg(not_utf8());
    let done = finish(cmd, &dir, "command-bytes");
    done.assert_code(0, "a command with an argument that is not UTF-8");
    assert!(done.stdout.contains("ff"), "{}", done.stdout);
}

/// An inherited LEASEHOLD_SLOT does not reach a command that holds no slot; a run under
/// --permits gives its own.
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
