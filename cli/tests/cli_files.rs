//! What leasehold reads from files and raw bytes as a person gives them: input it cannot
//! read as meant (bytes that are not UTF-8, a file that is not a small regular file) is
//! refused in one line before anything reaches Redis, and a Redis URL read from a file is
//! checked and its password never shown.

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt as _;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;

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
