//! Sentinel configurations: the bad ones are refused before any connection is tried, and
//! neither the refusal nor `Debug` shows a URL's secrets.

use std::net::TcpListener;
use std::time::Duration;

use crate::common::sentinel::MASTER_NAME;
use leasehold::*;

#[tokio::test]
async fn bad_sentinel_configuration_is_rejected_before_any_io() {
    // A sentinel URL that would work: no connection may reach it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let good = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let secret = "hunter2";
    let cases: Vec<(&str, RedisConfig, &str)> = vec![
        (
            "empty list",
            RedisConfig::sentinel(Vec::new(), MASTER_NAME),
            "at least one sentinel",
        ),
        (
            "bad port",
            RedisConfig::sentinel(
                vec![
                    good.clone(),
                    format!("redis://:{secret}@127.0.0.1:notaport"),
                ],
                MASTER_NAME,
            ),
            "sentinel URL 2 of 2",
        ),
        (
            "not a URL",
            RedisConfig::sentinel(vec![format!("{secret}@nowhere")], MASTER_NAME),
            "sentinel URL 1 of 1",
        ),
        (
            "database on a sentinel",
            RedisConfig::sentinel(vec![format!("{good}/3")], MASTER_NAME),
            "names database 3",
        ),
        (
            "empty master name",
            RedisConfig::sentinel(vec![good.clone()], ""),
            "is empty",
        ),
        (
            "master name with a space",
            RedisConfig::sentinel(vec![good.clone()], "two words"),
            "whitespace",
        ),
        (
            "unix node template",
            RedisConfig::sentinel(vec![good.clone()], MASTER_NAME)
                .sentinel_node_url_template("unix:///tmp/redis.sock"),
            "redis:// or rediss://",
        ),
        (
            "unparsable node template",
            RedisConfig::sentinel(vec![good.clone()], MASTER_NAME)
                .sentinel_node_url_template(format!("redis://:{secret}@host:port")),
            "sentinel_node_url_template",
        ),
        (
            "node template on a standalone config",
            RedisConfig::new(good.clone()).sentinel_node_url_template("redis://x"),
            "only to a sentinel configuration",
        ),
    ];
    for (name, config, expected) in cases {
        let debug = format!("{config:?}");
        assert!(!debug.contains(secret), "{name}: Debug leaks: {debug}");
        let err = RedisBackend::new(config).unwrap_err();
        let LeaseError::InvalidRedisUrl { reason } = &err else {
            panic!("{name}: expected InvalidRedisUrl, got {err:?}")
        };
        assert!(reason.contains(expected), "{name}: {reason}");
        assert!(!err.to_string().contains(secret), "{name}: leaks: {err}");
    }
    let err = RedisBackend::new(
        RedisConfig::sentinel(vec![good.clone()], MASTER_NAME).connect_timeout(Duration::ZERO),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        LeaseError::InvalidDuration {
            param: "connect_timeout",
            ..
        }
    ));
    // Valid configurations do no I/O either: connections are made on first use.
    let _valid = RedisBackend::new(RedisConfig::sentinel(vec![good], MASTER_NAME)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no connection may be attempted"
    );
}

#[test]
fn debug_output_of_a_sentinel_config_and_backend_shows_no_url() {
    let config = RedisConfig::sentinel(
        vec![
            "redis://:sentinel-secret@10.0.0.1:26379".to_owned(),
            "redis://10.0.0.2:26379".to_owned(),
        ],
        "leases",
    )
    .sentinel_node_url_template("redis://user:node-secret@primary/2");
    let shown = format!("{config:?}");
    let backend = format!("{:?}", RedisBackend::new(config).unwrap());
    for text in [&shown, &backend] {
        for hidden in ["sentinel-secret", "node-secret", "10.0.0.1", "user"] {
            assert!(!text.contains(hidden), "{hidden:?} in {text}");
        }
        assert!(text.contains("leases"), "{text}");
    }
    assert!(shown.contains("<redacted>"), "{shown}");
}
