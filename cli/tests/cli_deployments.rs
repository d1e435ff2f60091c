//! The CLI on the deployments the library supports, by URL: a Sentinel-managed primary
//! (`redis+sentinel://host,host/master`) followed through a failover by `run`, `inspect` and
//! `doctor`, and a Cluster (`redis+cluster://host,host`) for `run`, `inspect`, `list` and
//! `doctor`; a list URL
//! that is wrong is refused before any I/O, its password never shown.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::cli::*;
use common::cluster::ClusterTopology;
use common::sentinel::{SentinelTopology, query};

/// `host:port` of each URL, joined by commas: a list URL's hosts.
fn hosts(urls: &[String]) -> String {
    urls.iter()
        .map(|url| url.trim_start_matches("redis://"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `leasehold <sub> --redis <url>`, with the rest of the arguments.
fn at(url: &str, sub: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = bare();
    cmd.args([sub, "--redis", url]).args(args);
    cmd
}

/// Waits until `check` holds, for at most 20 s.
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A command that holds its lease until `go` exists.
fn hold_until(go: &std::path::Path) -> [String; 3] {
    [
        "bash".to_owned(),
        "-c".to_owned(),
        format!("while [ ! -e {} ]; do sleep 0.02; done", go.display()),
    ]
}

/// `run` keeps its lease through a failover: its renewals follow the primary the sentinels
/// name, the new primary's copy of the lease is renewed, `inspect` finds it there, and the
/// command ends with its own status.
#[test]
fn run_keeps_its_lease_through_a_sentinel_failover_and_inspect_follows() {
    let topology = SentinelTopology::start();
    let dir = TempDir::new("sentinel");
    let url = format!(
        "redis+sentinel://{}/{}",
        hosts(&topology.sentinel_urls()),
        topology.master_name()
    );
    let go = dir.path("go");
    let mut run = at(&url, "run", &["--resource", "s", "--ttl", "6s", "--"]);
    run.args(hold_until(&go));
    let mut run = Running::spawn(run, &dir, "run");
    let key = keys_of("s").lease().to_owned();
    let old = topology.primary_port();
    until("the lease is held", || {
        query::<i64>(topology.node(old), &["EXISTS", &key]) == 1
    });
    topology.wait_replicated();
    let new = topology.failover();
    assert_ne!(new, old, "the primary moved");
    // A renewal on the new primary puts its copy's TTL back up (renewals every 2 s).
    let pttl = || query::<i64>(topology.node(new), &["PTTL", &key]);
    let before = pttl();
    until("a renewal reached the new primary", || pttl() > before);
    let inspect = finish(at(&url, "inspect", &["--resource", "s"]), &dir, "inspect");
    inspect.assert_code(0, "inspect on the new primary: held");
    assert!(
        inspect.stdout.contains("held: yes"),
        "inspect: {}",
        inspect.stdout
    );
    let doctor = finish(at(&url, "doctor", &[]), &dir, "doctor");
    doctor.assert_code(0, "doctor after the failover");
    std::fs::write(&go, "").expect("the command's signal");
    let done = run.finish_within(EXIT_TIMEOUT, "run through a failover");
    done.assert_code(0, "the command's own status: the lease was kept");
    assert_eq!(
        query::<i64>(topology.node(new), &["EXISTS", &key]),
        0,
        "released on the new primary"
    );
}

/// `run`, `inspect` and `list` on a Cluster, through a list of seeds.
#[test]
fn run_inspect_and_list_work_on_a_cluster() {
    let cluster = ClusterTopology::start();
    let dir = TempDir::new("cluster");
    let url = format!("redis+cluster://{}", hosts(&cluster.seed_urls()));
    let go = dir.path("go");
    let mut run = at(&url, "run", &["--resource", "c", "--"]);
    run.args(hold_until(&go));
    let mut run = Running::spawn(run, &dir, "run");
    until("inspect says held", || {
        let inspect = finish(at(&url, "inspect", &["--resource", "c"]), &dir, "inspect");
        inspect.code() == Some(0) && inspect.stdout.contains("held: yes")
    });
    finish(at(&url, "doctor", &[]), &dir, "doctor").assert_code(0, "doctor on a cluster");
    let list = finish(at(&url, "list", &[]), &dir, "list");
    list.assert_code(0, "list on a cluster");
    assert_eq!(
        list.stdout.lines().filter(|l| l.contains("run")).count(),
        1,
        "one lease listed: {}",
        list.stdout
    );
    std::fs::write(&go, "").expect("the command's signal");
    run.finish_within(EXIT_TIMEOUT, "run on a cluster")
        .assert_code(0, "the command's own status");
    let inspect = finish(
        at(&url, "inspect", &["--resource", "c"]),
        &dir,
        "inspect after",
    );
    inspect.assert_code(1, "inspect once released: not held");
}

/// A list URL that is wrong is one line naming the mistake, before any I/O (nothing listens
/// on these hosts), and its password is never shown.
#[test]
fn a_wrong_list_url_is_refused_before_any_io_without_its_password() {
    let dir = TempDir::new("list-urls");
    let rows = [
        ("redis+sentinel://u:hunter2@127.0.0.1:1", "names its master"),
        (
            "redis+sentinel://u:hunter2@127.0.0.1:1,,127.0.0.1:2/m",
            "names no host",
        ),
        ("redis+cluster://u:hunter2@127.0.0.1:1/4", "only database 0"),
        (
            "redis+cluster://u:hunter2@127.0.0.1:99999",
            "not a port number",
        ),
    ];
    for (url, why) in rows {
        let done = finish(
            at(url, "run", &["--resource", "r", "--", "true"]),
            &dir,
            why,
        );
        done.assert_code(125, url);
        assert!(done.stderr.contains(why), "{url}: {}", done.stderr);
        assert!(!done.stderr.contains("hunter2"), "{url}: {}", done.stderr);
        assert_eq!(done.stderr.lines().count(), 1, "{url}: {}", done.stderr);
    }
}
