//! The `leasehold` binary as the CLI tests drive it: a subprocess with a clean
//! `LEASEHOLD_*` environment, its output in files, every wait bounded, and everything it
//! started killed (by PID) when the test ends.
//!
//! Timing: every wait has a deadline after which the test kills the subprocess and fails,
//! so no test can hang; timing assertions are upper bounds with a generous margin.
//!
//! Environment: each child gets a clean `LEASEHOLD_*` environment (so the developer's
//! `LEASEHOLD_REDIS_URL` or settings never leak in) plus `LEASEHOLD_COMMAND_TIMEOUT=500ms`:
//! the default 200 ms can expire spuriously on a starved machine, which would turn a test
//! about something else into a lost lease. 500 ms still fits a 1 s TTL (renew every 333 ms
//! < 1 s − 10 ms drift − 500 ms safety margin).

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{LeaseKeys, Namespace, Purpose, ResourceDigest};

use super::RedisServer;
pub use super::pids::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// Upper bound for any leasehold invocation that is expected to end on its own.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound for a subprocess to reach a state the test waits for (command started…).
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a process that was killed may take to disappear (be reaped).
pub const GONE_TIMEOUT: Duration = Duration::from_secs(3);
/// Poll interval of every wait loop.
pub const POLL: Duration = Duration::from_millis(5);

/// `LEASEHOLD_COMMAND_TIMEOUT` given to every child (see the module docs).
pub const COMMAND_TIMEOUT: &str = "500ms";

/// A shell fragment for commands that must hold the lease until the test says so: it waits
/// for the file `$DONE` (bounded at 30 s, so a failed test leaves nothing running for long).
pub const UNTIL_DONE: &str =
    r#"n=0; while [ ! -e "$DONE" ] && [ "$n" -lt 600 ]; do sleep 0.05; n=$((n+1)); done"#;

/// A temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "leasehold-cli-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `leasehold` with a clean `LEASEHOLD_*` environment, stdin closed, and no arguments yet.
pub fn bare() -> Command {
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd
}

/// `setpriv --reuid=<uid> --regid=<gid> --clear-groups <bin>`: a `leasehold` binary run as
/// another user (from a test running as root), with [`bare`]'s environment.
pub fn as_user(uid: u32, gid: u32, bin: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(bin);
    clean_env(&mut cmd);
    cmd
}

/// No inherited `LEASEHOLD_*` variable but the harness's choices, stdin closed.
pub fn clean_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LEASEHOLD_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("LEASEHOLD_REDIS_URL")
        .env("LEASEHOLD_COMMAND_TIMEOUT", COMMAND_TIMEOUT)
        .stdin(Stdio::null());
    // The suites run again with the keeper alone (`.ci/run`): what a host without PID
    // namespaces gets.
    if let Some(wanted) = std::env::var_os(PID_NAMESPACE_UNDER_TEST) {
        cmd.env("LEASEHOLD_PID_NAMESPACE", wanted);
    }
}

/// The harness's variable naming the `--pid-namespace` every run under test gets by default.
pub const PID_NAMESPACE_UNDER_TEST: &str = "LEASEHOLD_TEST_PID_NAMESPACE";

/// `leasehold <sub> --redis <server>`.
pub fn leasehold(sub: &str, server: &RedisServer) -> Command {
    let mut cmd = bare();
    cmd.args([sub, "--redis", &server.url()]);
    cmd
}

/// `leasehold run --redis <server> --resource <resource>` (options and `-- command` follow).
pub fn run_cmd(server: &RedisServer, resource: &str) -> Command {
    let mut cmd = leasehold("run", server);
    cmd.args(["--resource", resource]);
    cmd
}

/// `leasehold inspect --redis <server> --resource <resource>`.
pub fn inspect_cmd(server: &RedisServer, resource: &str) -> Command {
    let mut cmd = leasehold("inspect", server);
    cmd.args(["--resource", resource]);
    cmd
}

/// An exit status for a `FAULT` line: the code, or `signal_<n>`.
pub fn exit_text(done: &Finished) -> String {
    match (done.status.code(), done.status.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal_{signal}"),
        (None, None) => "unknown".to_owned(),
    }
}

/// How one leasehold invocation ended.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// When `try_wait` first saw the exit.
    pub ended_at: Instant,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }

    /// Panics with the whole output unless the exit status is `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32, what: &str) {
        assert_eq!(
            self.code(),
            Some(code),
            "{what}: expected exit {code}, got {:?} (signal {:?})\nstdout: {}\nstderr: {}",
            self.status.code(),
            self.status.signal(),
            self.stdout,
            self.stderr
        );
    }
}

/// A leasehold process the test started, with stdout/stderr going to files (never pipes: a
/// command that outlives leasehold would keep a pipe open). On drop it SIGKILLs leasehold
/// and every PID registered with `also_kill`, if still alive, so a failing test leaves
/// nothing running.
pub struct Running {
    pub child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    also_kill: Vec<u32>,
    finished: bool,
}

impl Running {
    pub fn spawn(mut cmd: Command, dir: &TempDir, label: &str) -> Running {
        let stdout = dir.path(&format!("{label}.stdout"));
        let stderr = dir.path(&format!("{label}.stderr"));
        let out = fs::File::create(&stdout).expect("create stdout file");
        let err = fs::File::create(&stderr).expect("create stderr file");
        let child = cmd
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
        Running {
            child,
            stdout,
            stderr,
            also_kill: Vec::new(),
            finished: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host's pid of the process the command knows as `seen` ([`host_pid`]).
    pub fn host_pid(&self, seen: u32) -> u32 {
        host_pid(self.pid(), seen)
    }

    /// Kill `pid` too (by PID) if it is still alive when this is dropped.
    pub fn also_kill(&mut self, pid: u32) {
        self.also_kill.push(pid);
    }

    pub fn try_finish(&mut self) -> Option<Finished> {
        let status = self.child.try_wait().expect("try_wait")?;
        let ended_at = Instant::now();
        self.finished = true;
        Some(Finished {
            status,
            stdout: fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: fs::read_to_string(&self.stderr).unwrap_or_default(),
            ended_at,
        })
    }

    /// Output so far (for failure messages).
    pub fn output_so_far(&self) -> String {
        format!(
            "stdout: {}\nstderr: {}",
            fs::read_to_string(&self.stdout).unwrap_or_default(),
            fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    /// Waits for the exit; kills it and panics if it takes longer than `limit`.
    #[track_caller]
    pub fn finish_within(&mut self, limit: Duration, what: &str) -> Finished {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(done) = self.try_finish() {
                return done;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.finished = true;
                panic!(
                    "{what}: leasehold (pid {}) still running after {limit:?}; killed\n{}",
                    self.child.id(),
                    self.output_so_far()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Polls `file` until it holds a complete line (written as `echo … > file` by the
    /// command) and returns its trimmed content; panics if leasehold exits first.
    #[track_caller]
    pub fn wait_for_line(&mut self, file: &Path, what: &str) -> String {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(text) = fs::read_to_string(file)
                && text.ends_with('\n')
            {
                return text.trim().to_owned();
            }
            if let Some(done) = self.try_finish() {
                panic!("{what}: leasehold exited before the command wrote {file:?}: {done:?}");
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the command did not write {file:?} within {READY_TIMEOUT:?}\n{}",
                self.output_so_far()
            );
            thread::sleep(POLL);
        }
    }

    /// Waits until the command wrote its PID to `pidfile`, and registers it for cleanup;
    /// returns it as this host knows it ([`host_pid`]).
    #[track_caller]
    pub fn wait_for_command_pid(&mut self, pidfile: &Path) -> u32 {
        let text = self.wait_for_line(pidfile, "command pid");
        let seen: u32 = text
            .parse()
            .unwrap_or_else(|e| panic!("pidfile {pidfile:?} holds {text:?}: {e}"));
        let pid = self.host_pid(seen);
        self.also_kill(pid);
        pid
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for &pid in &self.also_kill {
            if is_alive(pid) && is_test_command(pid) {
                send_signal(pid, "KILL");
            }
        }
    }
}

/// Runs `cmd` to the end (bounded by `EXIT_TIMEOUT`).
#[track_caller]
pub fn finish(cmd: Command, dir: &TempDir, label: &str) -> Finished {
    Running::spawn(cmd, dir, label).finish_within(EXIT_TIMEOUT, label)
}

pub fn all_keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.query(&["KEYS", "*"]);
    keys.sort();
    keys
}

/// Keys that are not fence counters: the lease keys.
pub fn lease_keys(server: &RedisServer) -> Vec<String> {
    // Not the fence counters (kept for ever), nor a waiter's keep-alive in a lease's line
    // (`…:line:<id>`), which outlives the wait by its PX (2 s) at most.
    all_keys(server)
        .into_iter()
        .filter(|k| !k.ends_with(":fence") && !k.contains(":line:"))
        .collect()
}

/// Polls until exactly one lease key exists, and returns it.
#[track_caller]
pub fn wait_for_lease_key(server: &RedisServer) -> String {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let keys = lease_keys(server);
        if let [key] = keys.as_slice() {
            return key.clone();
        }
        assert!(
            Instant::now() < deadline,
            "expected one lease key, have {keys:?}"
        );
        thread::sleep(POLL);
    }
}

/// `leasehold:lease:v2:<purpose>:{<group>}:<64 lowercase hex>`, the group being the digest's
/// first four hex digits.
pub fn is_lease_key(key: &str, purpose: &str) -> bool {
    let Some(rest) = key.strip_prefix(&format!("leasehold:lease:v2:{purpose}:{{")) else {
        return false;
    };
    let Some((group, hex)) = rest.split_once("}:") else {
        return false;
    };
    group.len() == 4
        && hex.len() == 64
        && hex.starts_with(group)
        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The keys leasehold uses for `resource` under the default namespace and purpose `run`.
pub fn keys_of(resource: &str) -> LeaseKeys {
    LeaseKeys::new(
        &Namespace::default(),
        &Purpose::new("run").expect("valid purpose"),
        &ResourceDigest::of(resource.as_bytes()),
    )
}

/// A shell command holding the lease until `release` (or drop): it writes its PID and the
/// fencing token it was given, then waits for a file.
pub struct Holder {
    pub running: Running,
    pub done: PathBuf,
    pub token: u64,
}

impl Holder {
    pub fn start(server: &RedisServer, dir: &TempDir, resource: &str, ttl: &str) -> Holder {
        let done = dir.path("holder.done");
        let token_file = dir.path("holder.token");
        let pidfile = dir.path("holder.pid");
        let mut cmd = run_cmd(server, resource);
        cmd.args(["--ttl", ttl, "--", "sh", "-c"])
            .arg(format!(
                r#"echo $$ > "$PIDFILE"; echo "$LEASEHOLD_FENCING_TOKEN" > "$TOKEN"; {UNTIL_DONE}"#
            ))
            .env("DONE", &done)
            .env("TOKEN", &token_file)
            .env("PIDFILE", &pidfile);
        let mut running = Running::spawn(cmd, dir, "holder");
        running.wait_for_command_pid(&pidfile);
        let text = running.wait_for_line(&token_file, "holder token");
        let token = text
            .parse()
            .unwrap_or_else(|e| panic!("LEASEHOLD_FENCING_TOKEN {text:?} is not a u64: {e}"));
        Holder {
            running,
            done,
            token,
        }
    }

    /// Lets the command end and returns how leasehold ended.
    pub fn release(mut self) -> Finished {
        fs::write(&self.done, "").expect("write done file");
        self.running.finish_within(EXIT_TIMEOUT, "holder")
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = fs::write(&self.done, "");
    }
}

/// Runs `leasehold <args>` (with `--redis <server>` after the subcommand unless a URL is
/// given) and returns its one line on stderr, asserting the refusal: exit 125, nothing on
/// stdout, nothing sent to Redis.
#[track_caller]
pub fn refused(
    server: &RedisServer,
    dir: &TempDir,
    label: &str,
    args: &[&str],
    env: Option<(&str, &str)>,
) -> String {
    let mut cmd = bare();
    cmd.arg(args[0]);
    if !args.contains(&"--redis") && env.is_none_or(|(var, _)| var != "LEASEHOLD_REDIS_URL") {
        cmd.args(["--redis", &server.url()]);
    }
    cmd.args(&args[1..]).envs(env);
    let done = finish(cmd, dir, label);
    let what = format!("{args:?} {env:?}");
    done.assert_code(125, &what);
    let lines = done.stderr_lines();
    assert_eq!(lines.len(), 1, "{what}: stderr {:?}", done.stderr);
    assert!(done.stdout.is_empty(), "{what}: stdout {:?}", done.stdout);
    assert_eq!(server.command_calls(), 0, "{what}: leasehold sent commands");
    let size: i64 = server.query(&["DBSIZE"]);
    assert_eq!(size, 0, "{what}: redis holds {:?}", all_keys(server));
    server.reset_stats();
    lines[0].to_owned()
}

/// A loopback port with nothing listening on it.
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}
