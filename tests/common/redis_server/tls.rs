//! What a TLS-only server needs beyond a plain one: a certificate the test makes itself
//! (no fixture to expire or leak), and `redis-cli --tls` to tell when it is ready, since
//! the raw-socket `PING` of a plain server cannot speak TLS.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::process::find_on_path;

/// Subdirectory of the server's directory holding `cert.pem` and `key.pem`.
pub const TLS_DIR: &str = "tls";

const OPENSSL_NOT_FOUND: &str = "openssl not found (needed by RedisServer::start_tls to make a \
                                 self-signed certificate): install the Debian package openssl; \
                                 TLS tests never skip";
const REDIS_CLI_NOT_FOUND: &str = "redis-cli not found (needed by RedisServer::start_tls to wait \
                                   for the TLS port): install the Debian package redis-tools \
                                   (redis-server depends on it); TLS tests never skip";

/// `redis-cli` next to `redis_server`, else on `PATH`, else `/usr/bin`.
pub fn find_redis_cli(redis_server: &Path) -> PathBuf {
    let sibling = redis_server.with_file_name("redis-cli");
    if sibling.is_file() {
        return sibling;
    }
    find_on_path("redis-cli").unwrap_or_else(|| panic!("{REDIS_CLI_NOT_FOUND}"))
}

/// `ping_pid` over TLS, with `redis-cli --tls --insecure` (`PING`, then
/// `INFO server`); `None` while the server does not answer `PONG`.
pub fn ping_pid_tls(redis_cli: &Path, port: u16) -> Option<Option<u32>> {
    let run = |args: &[&str]| -> Option<String> {
        let out = Command::new(redis_cli)
            .args([
                "--tls",
                "--insecure",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", redis_cli.display()));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    if run(&["PING"])?.trim() != "PONG" {
        return None;
    }
    let info = run(&["INFO", "server"]).unwrap_or_default();
    Some(
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok()),
    )
}

/// Writes `cert.pem` (self-signed, P-256, SAN `IP:127.0.0.1, DNS:localhost`,
/// valid 2 days) and `key.pem` into `dir` with the `openssl` CLI.
pub fn make_self_signed_cert(dir: &Path) -> Result<(), String> {
    let openssl = find_on_path("openssl").ok_or_else(|| OPENSSL_NOT_FOUND.to_owned())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = Command::new(&openssl)
        .args(["req", "-x509", "-nodes", "-days", "2"])
        .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}; {OPENSSL_NOT_FOUND}", openssl.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} req -x509 failed with {}:\n{}",
            openssl.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}
