//! `leasehold doctor`: can this Redis hold leases for this user, and what do its settings
//! mean for a held lease? Each finding is one line; the exit status says whether leases
//! can work at all.

use std::time::Duration;

use clap::Args;
use leasehold::{
    AcquireOutcome, FailureDetail, FailureKind, LeaseClient, LeaseRequest, Purpose, RedisBackend,
    RedisConfig, ReleaseOutcome, RenewOutcome, ResourceDigest, ServerCapabilities,
};

use crate::config::Common;
use crate::diagnose::Server;
use crate::{fail, status};

/// The oldest Redis leasehold's scripts run on (`SET … GET` came in 6.2).
const MIN_VERSION: (u32, u32) = (6, 2);

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    common: Common,
    /// Print one JSON object instead of lines: {"ok":<leases work>,"findings":[{"level":
    /// "ok"|"warn"|"fail","message":…},…]}.
    #[arg(long)]
    json: bool,
}

/// One line of the report.
#[derive(Debug, PartialEq, Eq)]
enum Finding {
    Ok(String),
    Warn(String),
    Fail(String),
}

impl Finding {
    fn level(&self) -> &'static str {
        match self {
            Finding::Ok(_) => "ok",
            Finding::Warn(_) => "warn",
            Finding::Fail(_) => "fail",
        }
    }

    fn text(&self) -> &str {
        match self {
            Finding::Ok(text) | Finding::Warn(text) | Finding::Fail(text) => text,
        }
    }

    fn print(&self) {
        match self {
            Finding::Ok(text) => println!("ok    {text}"),
            Finding::Warn(text) => println!("warn  {text}"),
            Finding::Fail(text) => println!("FAIL  {text}"),
        }
    }
}

/// `probe`: whether `run` gets a PID namespace here ([`crate::keeper::probe_namespace`],
/// taken before the async runtime started).
pub(crate) async fn doctor(
    args: DoctorArgs,
    probe: Result<Option<crate::keeper::Containment>, crate::keeper::Refusal>,
) -> u8 {
    let target = match args.common.target(None) {
        Ok(t) => t,
        Err(message) => return fail(message),
    };
    let config = RedisConfig::from_url(&target.url)
        .map(|config| config.connect_timeout(target.settings.connect_timeout));
    let backend = match config.and_then(RedisBackend::new) {
        Ok(b) => b,
        Err(e) => return fail(format!("{}: {e}", target.source)),
    };
    let client = match LeaseClient::new(backend.clone(), target.settings.clone()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut findings = vec![probe_cycle(&client, &target.server).await];
    if !matches!(findings[0], Finding::Fail(_)) {
        findings.push(probe_notices(&target.url, &client, &target.server).await);
        findings.extend(server_settings(&target.url, &client, &target.server).await);
    }
    findings.push(match crate::keeper::host_enforcement(&probe) {
        (true, text) => Finding::Ok(text),
        (false, text) => Finding::Warn(text),
    });
    let failed = findings.iter().any(|f| matches!(f, Finding::Fail(_)));
    if args.json {
        let findings: Vec<_> = findings
            .iter()
            .map(|f| serde_json::json!({ "level": f.level(), "message": f.text() }))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "ok": !failed, "findings": findings })
        );
    } else {
        for finding in &findings {
            finding.print();
        }
    }
    if failed { status::FAILED } else { 0 }
}

/// A throwaway lease (purpose `doctor`, a random resource): acquire, renew, release.
fn probe_request(client: &LeaseClient) -> Result<LeaseRequest, String> {
    let purpose = Purpose::new("doctor").map_err(|e| e.to_string())?;
    let nonce: u64 = rand::random();
    let resource = ResourceDigest::of(format!("leasehold-doctor-{nonce}").as_bytes());
    let attempt = client
        .new_attempt(&format!("doctor-{}", std::process::id()))
        .map_err(|e| e.to_string())?;
    LeaseRequest::builder(purpose, resource, attempt)
        .ttl(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())
}

async fn probe_cycle(client: &LeaseClient, server: &Server) -> Finding {
    let request = match probe_request(client) {
        Ok(r) => r,
        Err(e) => return Finding::Fail(e),
    };
    let namespace = &client.settings().namespace;
    let mut lease = match client.acquire(&request).await {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        Ok(
            AcquireOutcome::Unavailable { detail } | AcquireOutcome::Indeterminate { detail, .. },
        ) => {
            return Finding::Fail(format!("acquire: {}", server.explain(&detail)));
        }
        Ok(other) => return Finding::Fail(format!("acquire of a fresh lease answered {other:?}")),
        Err(e) => return Finding::Fail(e.to_string()),
    };
    let renewed = lease.renew().await;
    let released = lease.release().await;
    match (renewed, released) {
        (RenewOutcome::Renewed { .. }, ReleaseOutcome::Released) => Finding::Ok(format!(
            "acquire, renew and release work for this user at {} (scripts by EVALSHA, keys \
             {namespace}:lease:v2:*)",
            server.addr()
        )),
        (RenewOutcome::Renewed { .. }, other) => Finding::Fail(format!(
            "release: {}; leases would stay held until their TTL ends",
            match &other {
                ReleaseOutcome::Unavailable { detail }
                | ReleaseOutcome::Indeterminate { detail } => server.explain(detail),
                _ => other.as_str().to_owned(),
            }
        )),
        (other, _) => Finding::Fail(format!("renew: {other:?}")),
    }
}

/// Whether this user may SUBSCRIBE to a release channel — on a pub/sub connection of
/// doctor's own, as a waiter subscribes on its client's —, within the connect timeout and
/// the command timeout.
async fn probe_notices(url: &str, client: &LeaseClient, server: &Server) -> Finding {
    let request = match probe_request(client) {
        Ok(r) => r,
        Err(e) => return Finding::Fail(e),
    };
    // A throwaway resource's channel: nothing is published on it.
    let channel = client
        .keys(request.purpose(), request.resource())
        .release_channel()
        .to_owned();
    let settings = client.settings();
    let subscribe = async {
        let connect = async { redis::Client::open(url)?.get_async_pubsub().await };
        let mut pubsub = connect
            .await
            .map_err(|e| FailureDetail::new(FailureKind::Connect, e.to_string()))?;
        pubsub
            .subscribe(&channel)
            .await
            .map_err(|e| FailureDetail::new(FailureKind::ServerRefused, e.to_string()))
    };
    let bound = settings.connect_timeout + settings.command_timeout;
    let subscribed = tokio::time::timeout(bound, subscribe)
        .await
        .unwrap_or_else(|_| {
            Err(FailureDetail::new(
                FailureKind::Timeout,
                "subscribe timed out",
            ))
        });
    match subscribed {
        Ok(()) => Finding::Ok(
            "SUBSCRIBE works: a waiting acquirer wakes the moment a lease is released".to_owned(),
        ),
        Err(failure) => Finding::Warn(format!(
            "SUBSCRIBE on release channels failed ({}): waiting acquirers poll instead of \
             waking at a release",
            server.explain(&failure)
        )),
    }
}

/// Whether this user may PUBLISH on a release channel: the scripts publish their notices
/// best effort, so a refusal does not show in the lease cycle.
async fn probe_publish(
    conn: &mut redis::aio::MultiplexedConnection,
    client: &LeaseClient,
    server: &Server,
) -> Finding {
    let request = match probe_request(client) {
        Ok(r) => r,
        Err(e) => return Finding::Fail(e),
    };
    // A throwaway resource's channel: nobody listens to it.
    let channel = client
        .keys(request.purpose(), request.resource())
        .release_channel()
        .to_owned();
    let mut publish = redis::cmd("PUBLISH");
    publish.arg(&channel).arg("released");
    match tokio::time::timeout(Duration::from_secs(5), publish.query_async::<i64>(conn)).await {
        Ok(Ok(_)) => Finding::Ok(
            "PUBLISH works: a release wakes the acquirers waiting for it at once".to_owned(),
        ),
        Ok(Err(e)) => Finding::Warn(format!(
            "PUBLISH on release channels refused at {} ({}): releases still delete the \
             lease, but waiting acquirers are not woken by them; they find the lease free \
             at their next look, within 750 ms",
            server.addr(),
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        )),
        Err(_) => Finding::Warn("PUBLISH did not answer within 5s: not checked".to_owned()),
    }
}

/// PUBLISH, then version, eviction, persistence and replicas, from `INFO`.
async fn server_settings(url: &str, client: &LeaseClient, server: &Server) -> Vec<Finding> {
    let mut conn = match connect_again(url, server).await {
        Ok(conn) => conn,
        Err(finding) => return vec![finding],
    };
    let mut findings = vec![probe_publish(&mut conn, client, server).await];
    match read_info(&mut conn, server).await {
        Ok(info) => findings.extend(info_findings(&info)),
        Err(finding) => findings.push(finding),
    }
    findings
}

/// A connection of doctor's own for the checks the lease client does not make, or the
/// finding that says why they were not made.
async fn connect_again(
    url: &str,
    server: &Server,
) -> Result<redis::aio::MultiplexedConnection, Finding> {
    // The library already installed a TLS provider for a rediss:// URL.
    let connect = async {
        let client = redis::Client::open(url)?;
        client.get_multiplexed_async_connection().await
    };
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(Finding::Warn(format!(
            "cannot connect again to {} ({e}): PUBLISH, version, eviction and \
             persistence not checked",
            server.addr()
        ))),
        Err(_) => Err(Finding::Warn(
            "connecting again did not succeed within 5s: PUBLISH, version, eviction \
             and persistence not checked"
                .to_owned(),
        )),
    }
}

/// What `INFO` says of the server's version, eviction, persistence and replicas.
fn info_findings(info: &str) -> Vec<Finding> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let mut findings: Vec<Finding> = server_version(&field).into_iter().collect();
    findings.push(Finding::Ok(operations(ServerCapabilities::from_info(info))));
    let maxmemory = field("maxmemory")
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or(0);
    match field("maxmemory_policy") {
        _ if maxmemory == 0 => {
            findings.push(Finding::Ok("no maxmemory: nothing is evicted".to_owned()))
        }
        Some("noeviction") => findings.push(Finding::Ok(
            "maxmemory-policy noeviction: a held lease is never evicted".to_owned(),
        )),
        Some(policy) => findings.push(Finding::Warn(format!(
            "maxmemory-policy {policy} may evict a held lease under memory pressure: its holder \
             learns it at the next renewal, and another process may acquire in between; set \
             noeviction"
        ))),
        None => {}
    }
    match field("aof_enabled") {
        Some("1") => findings.push(Finding::Ok(
            "AOF on: a restart keeps held leases (as of the last fsync)".to_owned(),
        )),
        Some(_) => findings.push(Finding::Warn(
            "AOF off: a restart forgets held leases; holders learn it at their next renewal, \
             and another process may acquire in between (fencing tokens still increase: they \
             come from the server clock)"
                .to_owned(),
        )),
        None => {}
    }
    if let Some(replicas) = field("connected_slaves") {
        findings.push(Finding::Ok(format!(
            "role {}, {replicas} replica(s) connected{}",
            field("role").unwrap_or("unknown"),
            if replicas == "0" {
                ""
            } else {
                ": --replicas N makes an acquisition wait for them"
            }
        )));
    }
    findings
}

/// How leasehold runs its operations on this server: by its own compare-and-set commands
/// where it has them (design.md §4), else by the script.
fn operations(capabilities: ServerCapabilities) -> String {
    if capabilities == ServerCapabilities::SCRIPTS_ONLY {
        "operations by script (the server's own compare-and-set is used on Valkey 8.1 and \
         later)"
            .to_owned()
    } else {
        format!(
            "{capabilities}, acquisitions by script (a user refused one of these commands \
             gets the script)"
        )
    }
}

/// `INFO everything`, or the finding that says why the settings it shows were not checked.
async fn read_info(
    conn: &mut redis::aio::MultiplexedConnection,
    server: &Server,
) -> Result<String, Finding> {
    let mut info = redis::cmd("INFO");
    info.arg("everything");
    match tokio::time::timeout(Duration::from_secs(5), info.query_async::<String>(conn)).await {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(e)) => Err(Finding::Warn(format!(
            "INFO refused or failed at {} ({e}): version, eviction and persistence not checked",
            server.addr()
        ))),
        Err(_) => Err(Finding::Warn(
            "INFO did not answer within 5s: not checked".to_owned(),
        )),
    }
}

/// The servers CI runs leasehold's suites on (docs/production.md, "Redis").
const TESTED: &str = "tested on Redis 6.2, 7.0 and 8.2 and on Valkey 9.0 and 9.1";

/// What the server is and whether leasehold can use it, from `INFO`'s fields. Valkey names
/// itself (`server_name:valkey`, `valkey_version`) and gives in `redis_version` the Redis
/// version it is compatible with, which is what leasehold's scripts need.
fn server_version<'a>(field: &impl Fn(&str) -> Option<&'a str>) -> Option<Finding> {
    let compatible = field("redis_version")?;
    let mut parts = compatible.split('.').filter_map(|p| p.parse::<u32>().ok());
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let name = match (field("server_name"), field("valkey_version")) {
        (Some("valkey"), Some(version)) => {
            format!("Valkey {version} (compatible with Redis {compatible})")
        }
        (Some("valkey"), None) => format!("Valkey (compatible with Redis {compatible})"),
        _ => format!("Redis {compatible}"),
    };
    Some(if found >= MIN_VERSION {
        Finding::Ok(format!(
            "{name}: leasehold needs Redis 6.2 or later, or Valkey; {TESTED}"
        ))
    } else {
        Finding::Fail(format!(
            "{name}: leasehold needs Redis 6.2 or later (SET … GET), or Valkey"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version_of(info: &str) -> Option<Finding> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        };
        server_version(&field)
    }

    #[test]
    fn the_server_is_named_by_kind_and_version() {
        let cases = [
            (
                "redis_version:7.0.15",
                Some(Finding::Ok(format!(
                    "Redis 7.0.15: leasehold needs Redis 6.2 or later, or Valkey; {TESTED}"
                ))),
            ),
            (
                "redis_version:7.2.4\nserver_name:valkey\nvalkey_version:9.1.2",
                Some(Finding::Ok(format!(
                    "Valkey 9.1.2 (compatible with Redis 7.2.4): leasehold needs Redis 6.2 or \
                     later, or Valkey; {TESTED}"
                ))),
            ),
            (
                "redis_version:6.0.9",
                Some(Finding::Fail(
                    "Redis 6.0.9: leasehold needs Redis 6.2 or later (SET … GET), or Valkey"
                        .to_owned(),
                )),
            ),
            ("server_name:valkey", None),
        ];
        for (info, expected) in cases {
            assert_eq!(version_of(info), expected, "{info}");
        }
    }

    #[test]
    fn the_report_says_how_operations_run() {
        let valkey = "redis_version:7.2.4\nserver_name:valkey\nvalkey_version:9.1.2";
        let lines = |info: &str| -> Vec<String> {
            info_findings(info)
                .iter()
                .map(|f| f.text().to_owned())
                .collect()
        };
        assert!(
            lines(valkey).contains(
                &"renewals by SET … IFEQ, releases by DELIFEQ, acquisitions by script (a user \
                  refused one of these commands gets the script)"
                    .to_owned()
            ),
            "{:?}",
            lines(valkey)
        );
        assert!(
            lines("redis_version:7.0.15")
                .iter()
                .any(|l| l.starts_with("operations by script")),
            "{:?}",
            lines("redis_version:7.0.15")
        );
    }
}
