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
/// `--redis-file`: a file that is not a small regular UTF-8 file holding something is
/// refused in one line naming it, exit 125, before anything reaches Redis; a good one is
/// used over `LEASEHOLD_REDIS_URL`, with one warning line when others may read it; its
/// password never shows.
#[test]
fn a_redis_file_is_read_checked_and_its_password_never_shown() {
    use std::os::unix::fs::PermissionsExt as _;
    let server = RedisServer::start();
    let dir = TempDir::new("redis-file");
    let write = |name: &str, bytes: &[u8], mode: u32| {
        let path = dir.path(name);
        fs::write(&path, bytes).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    };
    let empty = write("empty", b"\n", 0o600);
    let long = write("long", &[b'x'; 5000], 0o600);
    let not_utf8 = write("not-utf8", b"redis://\xff\n", 0o600);
    let secret = write("secret", b"http://user:s3cret-word@127.0.0.1:1\n", 0o600);
    let missing = dir.path("missing");
    let directory = dir.path("");
    let cases = [
        missing.as_path(),
        empty.as_path(),
        long.as_path(),
        not_utf8.as_path(),
        secret.as_path(),
        directory.as_path(),
        std::path::Path::new("/dev/zero"),
    ];
    server.reset_stats();
    for (i, path) in cases.iter().enumerate() {
        let mut cmd = bare();
        cmd.args(["run", "--resource", "x", "--redis-file"])
            .arg(path)
            .args(["--", "true"]);
        let started = Instant::now();
        let done = finish(cmd, &dir, &format!("case{i}"));
        let what = format!("--redis-file {}", path.display());
        done.assert_code(125, &what);
        let lines = done.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: stderr {:?}", done.stderr);
        assert!(lines[0].contains("--redis-file"), "{what}: {:?}", lines[0]);
        assert!(
            !done.stderr.contains("s3cret-word"),
            "{what}: {:?}",
            lines[0]
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
        assert_eq!(server.command_calls(), 0, "{what}: leasehold sent commands");
    }

    // A good file, over a variable that names no server: the run takes the file's URL.
    let good = write("good", format!("{}\n", server.url()).as_bytes(), 0o600);
    let mut cmd = bare();
    cmd.env("LEASEHOLD_REDIS_URL", "redis://127.0.0.1:1")
        .args(["run", "--resource", "x", "--redis-file"])
        .arg(&good)
        .args(["--", "true"]);
    let done = finish(cmd, &dir, "good");
    done.assert_code(0, "a good --redis-file");
    assert_eq!(done.stderr, "", "a private file: no warning");

    // Readable by others: the run goes on, with one warning line.
    fs::set_permissions(&good, fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut cmd = bare();
    cmd.args(["run", "--resource", "x", "--redis-file"])
        .arg(&good)
        .args(["--", "true"]);
    let done = finish(cmd, &dir, "shared");
    done.assert_code(0, "a --redis-file others may read");
    let lines = done.stderr_lines();
    assert_eq!(lines.len(), 1, "one warning: {:?}", done.stderr);
    assert!(lines[0].contains("readable by others"), "{:?}", lines[0]);

    // With --redis too: refused, naming both.
    let mut cmd = bare();
    cmd.args([
        "run",
        "--resource",
        "x",
        "--redis",
        &server.url(),
        "--redis-file",
    ])
    .arg(&good)
    .args(["--", "true"]);
    let done = finish(cmd, &dir, "both");
    assert_ne!(done.code(), Some(0), "--redis with --redis-file ran");
    assert!(done.stderr.contains("--redis-file"), "{:?}", done.stderr);
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

/// The one rule for variables (cli/src/variables.rs), on a real server: a bad value from a
/// variable is refused before any I/O in one line naming the variable; a URL or resource
/// given by a variable and by its file's variable is refused, not guessed at; options that
/// need `--replicas` on the command line ask nothing when set by their variables; a flag
/// overrides its variable (`-n` over `LEASEHOLD_WAIT`, `-E` over
/// `LEASEHOLD_CONFLICT_EXIT_CODE`); and the variables take effect — the files, the TTL, the
/// holder, `--json`, `--quiet`.
#[test]
fn variables_configure_what_their_flags_do_and_a_flag_overrides_its_variable() {
    let server = RedisServer::start();
    let dir = TempDir::new("variables");
    server.reset_stats();
    for (var, value) in [
        ("LEASEHOLD_TTL", "5x"),
        ("LEASEHOLD_PERMITS", "0"),
        ("LEASEHOLD_LOG_FORMAT", "xml"),
        ("LEASEHOLD_QUIET", "maybe"),
        ("LEASEHOLD_METRICS_ADDR", "nowhere"),
    ] {
        let line = refused(
            &server,
            &dir,
            var,
            &["run", "--resource", "x", "--", "true"],
            Some((var, value)),
        );
        assert!(
            line.starts_with(&format!("leasehold: {var}: ")),
            "{var}={value}: {line}"
        );
    }
    let mut cmd = bare();
    cmd.env("LEASEHOLD_REDIS_URL", server.url())
        .env("LEASEHOLD_TTL", OsString::from_vec(b"3\xffs".to_vec()))
        .args(["run", "--resource", "x", "--", "true"]);
    let done = finish(cmd, &dir, "not-utf8");
    done.assert_code(125, "LEASEHOLD_TTL not UTF-8");
    assert!(
        done.stderr
            .contains("LEASEHOLD_TTL: the value is not UTF-8"),
        "{}",
        done.stderr
    );
    let url_file = dir.path("url");
    fs::write(&url_file, format!("{}\n", server.url())).expect("write");
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&url_file, fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let url_file = url_file.to_str().expect("a UTF-8 path").to_owned();
    let mut cmd = bare();
    cmd.env("LEASEHOLD_REDIS_URL", server.url())
        .env("LEASEHOLD_REDIS_FILE", &url_file)
        .args(["run", "--resource", "x", "--", "true"]);
    let done = finish(cmd, &dir, "url-and-file");
    done.assert_code(125, "both URL variables");
    assert!(
        done.stderr
            .contains("LEASEHOLD_REDIS_URL and LEASEHOLD_REDIS_FILE are both set"),
        "{}",
        done.stderr
    );
    let line = refused(
        &server,
        &dir,
        "replica-wait",
        &[
            "run",
            "--resource",
            "x",
            "--replica-wait",
            "1s",
            "--",
            "true",
        ],
        None,
    );
    assert!(line.contains("--replica-wait needs --replicas"), "{line}");
    let line = refused(
        &server,
        &dir,
        "no-wait-and-wait",
        &["run", "--resource", "x", "-n", "--wait", "1s", "--", "true"],
        None,
    );
    assert!(line.contains("--no-wait and --wait"), "{line}");
    assert_eq!(server.command_calls(), 0, "the refusals sent commands");

    // Taking effect: the URL and the resource from files named by variables, the TTL and
    // the holder from theirs; the variable for --replica-wait alone asks for nothing.
    let resource_file = dir.path("resource");
    fs::write(&resource_file, "from-a-file\n").expect("write");
    let done_file = dir.path("held.done");
    let started = dir.path("held.started");
    let mut cmd = bare();
    cmd.env("LEASEHOLD_REDIS_FILE", &url_file)
        .env("LEASEHOLD_RESOURCE_FILE", &resource_file)
        .env("LEASEHOLD_TTL", "7s")
        .env("LEASEHOLD_HOLDER", "set-by-variable")
        .env("LEASEHOLD_REPLICA_WAIT", "2s")
        .env("DONE", &done_file)
        .env("STARTED", &started)
        .args(["run", "--", "sh", "-c"])
        .arg(r#"echo started > "$STARTED"; while [ ! -e "$DONE" ]; do sleep 0.05; done"#);
    let mut holder = Running::spawn(cmd, &dir, "held");
    holder.wait_for_line(&started, "the held command's start");
    let key = keys_of("from-a-file");
    let pttl: i64 = server.query(&["PTTL", key.lease()]);
    assert!(
        (5_000..=7_000).contains(&pttl),
        "PTTL {pttl} under LEASEHOLD_TTL=7s"
    );

    let mut inspect = bare();
    inspect
        .env("LEASEHOLD_REDIS_URL", server.url())
        .env("LEASEHOLD_RESOURCE", "from-a-file")
        .env("LEASEHOLD_JSON", "true")
        .arg("inspect");
    let seen = finish(inspect, &dir, "inspect");
    seen.assert_code(0, "inspect, held");
    assert!(
        seen.stdout.contains(r#""holder":"set-by-variable""#),
        "{}",
        seen.stdout
    );

    // A contender: quiet and its exit status by variables; -E and -n override theirs.
    let contend = |extra: &[&str], label: &str| {
        let mut cmd = bare();
        cmd.env("LEASEHOLD_REDIS_URL", server.url())
            .env("LEASEHOLD_RESOURCE", "from-a-file")
            .env("LEASEHOLD_QUIET", "1")
            .env("LEASEHOLD_CONFLICT_EXIT_CODE", "3")
            .env("LEASEHOLD_WAIT", "30s")
            .arg("run")
            .args(extra)
            .args(["--", "true"]);
        let started = Instant::now();
        let done = finish(cmd, &dir, label);
        (done, started.elapsed())
    };
    let (done, took) = contend(&["-n"], "contender");
    done.assert_code(3, "LEASEHOLD_CONFLICT_EXIT_CODE=3");
    assert_eq!(done.stderr, "", "LEASEHOLD_QUIET=1");
    assert!(took < Duration::from_secs(10), "-n waited {took:?}");
    let (done, _) = contend(&["-n", "-E", "4"], "contender-E");
    done.assert_code(4, "-E 4 over LEASEHOLD_CONFLICT_EXIT_CODE=3");

    fs::write(&done_file, "").expect("write");
    holder
        .finish_within(Duration::from_secs(10), "held")
        .assert_code(0, "the held run");
}
