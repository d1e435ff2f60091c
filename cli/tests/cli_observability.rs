//! The CLI's `--metrics-addr` answers with Prometheus text while a command runs, and
//! `--log-format json` writes one JSON object per line on stderr — neither carrying the raw
//! resource id or an owner token.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::RedisServer;

const RAW_ID: &str = "raw-observed-id-0815";

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn metrics_endpoint_serves_prometheus_text_while_the_command_runs() {
    let server = RedisServer::start();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_remove("LEASEHOLD_REDIS_URL")
        .args(["--log-format", "json", "--log-level", "info", "run"])
        .args([
            "--redis",
            &server.url(),
            "--resource",
            RAW_ID,
            "--ttl",
            "1s",
        ])
        .args([
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--",
            "sleep",
            "3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Poll until a renewal has been confirmed and shows in the scrape.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if let Some(body) = scrape(port)
            && body.contains(r#"leasehold_renew_total{purpose="run",outcome="renewed"}"#)
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no metrics while the command ran"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.starts_with("HTTP/1."), "{body}");
    assert!(
        body.contains(r#"leasehold_acquire_total{purpose="run",outcome="acquired"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"leasehold_leases_held{purpose="run"} 1"#),
        "{body}"
    );
    assert!(body.contains("leasehold_renew_margin_seconds"), "{body}");
    // The event counters a dashboard watches exist from the start, at zero.
    assert!(
        body.contains(r#"leasehold_cancellations_total{purpose="run",reason="lost"} 0"#),
        "{body}"
    );
    assert!(!body.contains(RAW_ID));

    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.is_empty(), "info logs expected");
    for line in stderr.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(value.get("level").is_some(), "{line}");
    }
    assert!(
        stderr.contains("\"lease_actor\""),
        "the lease's span is in the logs"
    );
    // The command's own events (here `lease acquired`) are inside the lease's span.
    let acquired: serde_json::Value = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["fields"]["message"] == "lease acquired")
        .unwrap_or_else(|| panic!("no `lease acquired` event: {stderr}"));
    let spans = acquired["spans"].as_array().cloned().unwrap_or_default();
    assert!(
        spans
            .iter()
            .any(|span| span["name"] == "lease_actor" && span["purpose"].is_string()),
        "`lease acquired` outside the lease's span: {acquired}"
    );
    assert!(!stderr.contains(RAW_ID), "raw resource id in the logs");
}

#[test]
fn a_metrics_address_in_use_is_a_clear_failure_before_any_io() {
    let server = RedisServer::start();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_remove("LEASEHOLD_REDIS_URL")
        .args(["run", "--redis", &server.url(), "--resource", "r"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}"), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--metrics-addr"), "{stderr}");
    let keys: Vec<String> = server.query(&["KEYS", "*"]);
    assert!(keys.is_empty(), "{keys:?}");
}
