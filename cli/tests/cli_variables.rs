//! The one rule for variables (cli/src/variables.rs) as a person setting them meets it:
//! every option about the connection, the lease or the output has a `LEASEHOLD_*`
//! variable, a bad value is refused before any I/O naming the variable, and a flag
//! overrides its variable.

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt as _;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;

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
