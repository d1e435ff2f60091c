//! A descendant that makes itself root under a non-root leasehold: it never gains the
//! privileges by default (`no_new_privs`, and a user namespace where setuid programs are
//! void), so it dies with the tree; with `--allow-new-privileges` it does, leasehold cannot
//! signal it, and leasehold never says it was stopped. Real processes: leasehold runs as
//! `nobody` (through `setpriv`); the helper is a setuid-root program that makes itself root
//! for good (`setresuid(0, 0, 0)`, so that its real uid is no longer the caller's, who
//! could otherwise still signal it) and then runs a witness like the rest of the tree.
//!
//! These tests need root (CI runs as root), a C compiler (`cc`, for the helper) and a
//! temporary directory that honours setuid bits; they fail, never skip, where one is
//! missing.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::observe::CpuLoad;
use common::tree::*;
use common::witness::*;

/// The setuid helper: root for good where the kernel lets it be (its real, effective and
/// saved ids all 0), then the program it is given, as it is (also where it could not).
const BECOME_ROOT: &str = r#"
#define _GNU_SOURCE
#include <unistd.h>
int main(int argc, char **argv) {
    (void)argc;
    if (setresgid(0, 0, 0) == 0) setresuid(0, 0, 0);
    execv(argv[1], argv + 1);
    return 127;
}
"#;

/// `nobody`'s ids on Debian.
const NOBODY: (u32, u32) = (65534, 65534);

/// A run as `nobody` whose command witnesses, with a setuid-root helper that witnesses too.
struct Unprivileged {
    dir: TempDir,
    bin: PathBuf,
    helper: PathBuf,
    script: PathBuf,
}

impl Unprivileged {
    /// Copies the binary (readable by `nobody`) and bash (setuid root) into a directory
    /// everyone may write; checks that setuid is honoured there.
    fn new(label: &str) -> Unprivileged {
        // SAFETY: geteuid reads this process's credentials.
        assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root");
        let dir = TempDir::new(label);
        let mode = |path: &PathBuf, mode: u32| {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
        };
        mode(&dir.path(""), 0o777);
        let bin = dir.path("leasehold");
        fs::copy(BIN, &bin).expect("copy leasehold");
        mode(&bin, 0o755);
        let helper = dir.path("become-root");
        let source = dir.path("become-root.c");
        fs::write(&source, BECOME_ROOT).expect("write the helper's source");
        let built = Command::new("cc")
            .arg("-o")
            .arg(&helper)
            .arg(&source)
            .status()
            .expect("cc: a C compiler builds the setuid helper");
        assert!(built.success(), "cc failed on the setuid helper");
        mode(&helper, 0o4755);
        let script = dir.path("witness.sh");
        // `witness.sh <role>`: writes `<role> <pid>` to $PIDS, then the clock to $W for ever.
        fs::write(
            &script,
            r#"exec 3<> <(:); exec 4>>"$W"; echo "$1 $BASHPID" >> "$PIDS"
while :; do echo "$BASHPID $EPOCHREALTIME" >&4; read -t 0.005 -u 3; done
"#,
        )
        .expect("write the witness script");
        mode(&script, 0o755);
        let unprivileged = Unprivileged {
            dir,
            bin,
            helper,
            script,
        };
        unprivileged.check_setuid_is_honoured();
        unprivileged
    }

    /// The helper run by `nobody` outside leasehold is root: what makes the rows real.
    fn check_setuid_is_honoured(&self) {
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&self.helper)
            .args(["/bin/sleep", "5"])
            .spawn()
            .expect("spawn the helper");
        let euid = effective_uid(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            euid,
            Some(0),
            "setuid is not honoured in {}: these tests need a file system without nosuid",
            self.dir.path("").display()
        );
    }

    /// `leasehold run` as `nobody` with `options`; its command (bash) starts the helper
    /// (`become-root /bin/bash witness.sh`) in the background, and both witness. Returns the run and the two
    /// pids as this host knows them: (the command, the helper).
    fn start(&self, server: &RedisServer, resource: &str, options: &[&str]) -> (Running, u32, u32) {
        let pids = self.dir.path(&format!("{resource}.pids"));
        let log = self.dir.path(&format!("{resource}.log"));
        // Made here, writable by all: whichever of the two processes opened one first
        // would otherwise own it (the root helper's umask leaves the command out).
        for file in [&pids, &log] {
            fs::write(file, "").expect("create a shared file");
            fs::set_permissions(file, fs::Permissions::from_mode(0o666)).expect("chmod");
        }
        let mut cmd = as_user(NOBODY.0, NOBODY.1, &self.bin);
        cmd.args(["run", "--redis", &server.url(), "--resource", resource])
            .args(options)
            .args(["--", "bash", "-c"])
            .arg(format!(
                r#"{helper} /bin/bash {script} helper & exec bash {script} command"#,
                helper = self.helper.display(),
                script = self.script.display()
            ))
            .env("W", &log)
            .env("PIDS", &pids)
            .env("LC_ALL", "C")
            .process_group(0);
        let mut run = Running::spawn(cmd, &self.dir, resource);
        let deadline = Instant::now() + READY_TIMEOUT;
        let seen = loop {
            let text = fs::read_to_string(&pids).unwrap_or_default();
            let role = |name: &str| -> Option<u32> {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            };
            if let (Some(command), Some(helper)) = (role("command "), role("helper ")) {
                break (command, helper);
            }
            if let Some(done) = run.try_finish() {
                panic!("{resource}: leasehold exited before its command started: {done:?}");
            }
            assert!(
                Instant::now() < deadline,
                "{resource}: no pids\n{}",
                run.output_so_far()
            );
            thread::sleep(POLL);
        };
        let (command, helper) = (run.host_pid(seen.0), run.host_pid(seen.1));
        run.also_kill(command);
        run.also_kill(helper);
        (run, command, helper)
    }

    fn log(&self, resource: &str) -> PathBuf {
        self.dir.path(&format!("{resource}.log"))
    }
}

/// The effective uid of `pid` (`Uid:` in `/proc/<pid>/status`: real, effective, …),
/// waiting up to a second for it to show (a process just forked may still be exec'ing).
fn effective_uid(pid: u32) -> Option<u32> {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1)?.parse().ok());
        // Root once the helper ran; before its exec the child is still nobody.
        if uid == Some(0) || Instant::now() >= until {
            return uid;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_setuid_helper_under_a_non_root_leasehold_stays_unprivileged_and_dies_with_leasehold() {
    let server = RedisServer::start();
    let setup = Unprivileged::new("suid-killed");
    let _load = CpuLoad::start();
    let resource = "suid-killed";
    let (mut run, command, helper) = setup.start(&server, resource, &["--ttl", "2s"]);
    assert_ne!(
        effective_uid(helper),
        Some(0),
        "the helper became root under leasehold"
    );
    let key = keys_of(resource).lease().to_owned();
    // The next holder runs as root: it only needs the lease.
    let next = Next::start(&server, &setup.dir, resource);
    assert!(send_signal(run.pid(), "KILL"), "kill -KILL leasehold");
    let expiry = expiry_micros(&server, &key).expect("the lease outlives leasehold until its TTL");
    let took = assert_all_gone_within(
        &[(command, "the command"), (helper, "the setuid helper")],
        STOP_LIMIT,
        "leasehold (run as nobody) was SIGKILLed",
    );
    let _ = run.finish_within(EXIT_TIMEOUT, "killed leasehold");
    let first = next.first_write();
    let last = last_write(&setup.log(resource)).expect("the tree wrote");
    assert!(
        last < expiry,
        "the tree wrote {} µs after the lease's end",
        last - expiry
    );
    assert!(
        last < first,
        "the tree wrote {} µs after the next holder",
        last - first
    );
    println!(
        "measured: leasehold as nobody SIGKILLed → the command and its setuid helper (never \
         root) gone in {took:?}; last write {:.1} ms before the lease's end",
        (expiry - last) as f64 / 1000.0
    );
}

#[test]
fn a_setuid_helper_is_stopped_with_the_command_when_the_lease_is_deleted() {
    let server = RedisServer::start();
    let setup = Unprivileged::new("suid-deleted");
    // In a namespace (the default), and with no_new_privs alone.
    for (resource, mode) in [("suid-deleted-ns", "auto"), ("suid-deleted-nnp", "off")] {
        let options = [
            "--ttl",
            "3s",
            "--renew-every",
            "500ms",
            "--pid-namespace",
            mode,
        ];
        let (mut run, command, helper) = setup.start(&server, resource, &options);
        assert_ne!(
            effective_uid(helper),
            Some(0),
            "{mode}: the helper became root"
        );
        let deleted_at = Instant::now();
        let _: i64 = server.query(&["DEL", keys_of(resource).lease()]);
        let took = assert_all_gone_within(
            &[(command, "the command"), (helper, "the setuid helper")],
            Duration::from_secs(2),
            "the lease was deleted",
        );
        let done = run.finish_within(EXIT_TIMEOUT, "run whose lease was deleted");
        done.assert_code(124, "the lease was lost");
        assert!(
            done.stderr.contains("the command was stopped"),
            "{}",
            done.stderr
        );
        println!(
            "measured: --pid-namespace {mode}: the setuid helper (never root) gone {took:?} after DEL (renewing every 500 ms; {:?} in all)",
            deleted_at.elapsed()
        );
    }
}

#[test]
fn a_helper_that_became_root_is_never_said_stopped_and_keeps_the_lease_held() {
    let server = RedisServer::start();
    let setup = Unprivileged::new("suid-root");
    let options = [
        "--ttl",
        "3s",
        "--renew-every",
        "500ms",
        "--allow-new-privileges",
        "--pid-namespace",
        "auto",
    ];
    let resource = "suid-root";
    let (mut run, command, helper) = setup.start(&server, resource, &options);
    // With --allow-new-privileges a non-root leasehold runs without a namespace, and the
    // helper is root: leasehold cannot signal it.
    assert_eq!(effective_uid(helper), Some(0), "the helper is root");
    let key = keys_of(resource).lease().to_owned();
    let _: i64 = server.query(&["DEL", &key]);
    assert_all_gone_within(&[(command, "the command")], Duration::from_secs(2), "DEL");
    let done = run.finish_within(EXIT_TIMEOUT, "run whose helper cannot be killed");
    assert!(common::pids::is_alive(helper), "the root helper runs on");
    done.assert_code(122, "a process refused leasehold's signals");
    assert!(
        done.stderr
            .contains(&format!("process {helper} of the command")),
        "names the helper: {}",
        done.stderr
    );
    assert!(
        !done.stderr.contains("was stopped"),
        "never said stopped: {}",
        done.stderr
    );
    assert!(
        send_signal(helper, "KILL"),
        "the test ends the helper (as root)"
    );
    println!(
        "measured: a root helper under nobody's leasehold: exit 122, named, never said stopped"
    );
}

#[test]
fn a_helper_that_became_root_and_outlives_the_command_keeps_the_lease_renewed_until_it_ends() {
    let server = RedisServer::start();
    let setup = Unprivileged::new("suid-leftover");
    let resource = "suid-leftover";
    let options = [
        "--ttl",
        "2s",
        "--grace",
        "100ms",
        "--timeout",
        "300ms",
        "--kill-after",
        "100ms",
        "--allow-new-privileges",
        "--pid-namespace",
        "auto",
    ];
    let (mut run, command, helper) = setup.start(&server, resource, &options);
    assert_eq!(effective_uid(helper), Some(0), "the helper is root");
    // --timeout's TERM and --kill-after's KILL end the command; the helper refuses both.
    assert_all_gone_within(
        &[(command, "the command")],
        Duration::from_secs(3),
        "--timeout",
    );
    let key = keys_of(resource).lease().to_owned();
    let held_at = expiry_micros(&server, &key).expect("the lease is kept while the helper runs");
    // Two TTLs later it is still held: renewed, not left to expire.
    thread::sleep(Duration::from_secs(4));
    let later = expiry_micros(&server, &key).expect("still held two TTLs later");
    assert!(later > held_at, "renewed while the helper runs");
    assert!(run.try_finish().is_none(), "leasehold waits for the helper");
    assert!(
        send_signal(helper, "KILL"),
        "the test ends the helper (as root)"
    );
    let done = run.finish_within(EXIT_TIMEOUT, "run whose helper ended");
    done.assert_code(122, "a process refused leasehold's signals");
    assert!(
        done.stderr
            .contains(&format!("process {helper} of the command")),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("was stopped"), "{}", done.stderr);
    assert!(
        lease_keys(&server).is_empty(),
        "released once the helper ended"
    );
}

/// `leasehold <args>` as `nobody` in a mount namespace whose `/proc/sys` is covered (as a
/// container's masked paths cover it): the kernel then refuses the PID namespace its own
/// `/proc`, and a run gets the keeper alone.
fn masked(setup: &Unprivileged, args: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-m",
        "sh",
        "-c",
        r#"mount --make-rprivate / && mount -o bind,ro /proc/sys /proc/sys && exec "$@""#,
        "sh",
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ])
    .arg(&setup.bin)
    .args(args);
    clean_env(&mut cmd);
    cmd
}

#[test]
fn a_host_that_refuses_the_namespace_gets_the_keeper_alone_and_require_refuses_before_redis() {
    let server = RedisServer::start();
    let setup = Unprivileged::new("masked");
    // Nothing listens there: a refusal that reached for Redis would say so instead.
    let nowhere = format!("redis://127.0.0.1:{}", closed_port());
    let require = finish(
        masked(
            &setup,
            &[
                "run",
                "--redis",
                &nowhere,
                "--resource",
                "masked",
                "--pid-namespace",
                "require",
                "--",
                "true",
            ],
        ),
        &setup.dir,
        "require",
    );
    require.assert_code(125, "--pid-namespace require on a host that refuses it");
    assert_eq!(require.stderr_lines().len(), 1, "{}", require.stderr);
    assert!(
        require
            .stderr
            .contains("--pid-namespace require: the namespace's /proc cannot be mounted"),
        "{}",
        require.stderr
    );
    let url = server.url();
    let auto = finish(
        masked(
            &setup,
            &[
                "run",
                "--redis",
                &url,
                "--resource",
                "masked",
                "--log-level",
                "debug",
                "--",
                "true",
            ],
        ),
        &setup.dir,
        "auto",
    );
    auto.assert_code(0, "auto falls back to the keeper alone");
    assert!(
        auto.stderr.contains("no PID namespace for the command")
            && auto.stderr.contains("the keeper alone"),
        "{}",
        auto.stderr
    );
    let doctor = finish(
        masked(&setup, &["doctor", "--redis", &url]),
        &setup.dir,
        "doctor",
    );
    assert!(
        doctor
            .stdout
            .contains("warn  process tree: no PID namespace for the command"),
        "{}",
        doctor.stdout
    );
}
