//! Self-test of the shared test support code in `tests/common/`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Proxy, ProxyMode, RedisServer};

/// A sync connection through `url` with the given read timeout.
fn connect(url: &str, read_timeout: Duration) -> redis::Connection {
    let conn = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    conn.set_read_timeout(Some(read_timeout)).unwrap();
    conn.set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    conn
}

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

/// Polls `f` every 5 ms until it returns true or `timeout` passes.
fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn support_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RedisServer>();
    check::<Proxy>();
    check::<ProxyMode>();
}

#[test]
fn server_starts_and_answers() {
    let server = RedisServer::start();
    assert!(server.is_running());
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert_eq!(
        server.cmd(&["PING"]),
        redis::Value::SimpleString("PONG".into())
    );
    assert_eq!(server.cmd(&["SET", "k", "v"]), redis::Value::Okay);
    assert_eq!(
        server.query::<Option<String>>(&["GET", "k"]).as_deref(),
        Some("v")
    );
    assert_eq!(server.query::<i64>(&["DBSIZE"]), 1);
    // Server-side errors come back as Err from try_cmd.
    assert!(server.try_cmd(&["INCR", "k"]).is_err());
    // The process really is the one we started, with the options we asked for.
    let info: String = server.query(&["INFO", "server"]);
    assert!(info.contains(&format!("process_id:{}", server.pid())));
    let save: Vec<String> = server.query(&["CONFIG", "GET", "save"]);
    assert_eq!(save, ["save", ""]);
    let aof: Vec<String> = server.query(&["CONFIG", "GET", "appendonly"]);
    assert_eq!(aof, ["appendonly", "no"]);
    // A separate connection sees the same data.
    let mut conn = server.conn();
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "v");
}

#[test]
fn servers_are_isolated() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.cmd(&["SET", "only-a", "1"]);
    assert_eq!(b.query::<Option<String>>(&["GET", "only-a"]), None);
}

#[test]
fn command_calls_counts_commands_but_not_the_harness() {
    let server = RedisServer::start();
    server.reset_stats();
    assert_eq!(server.command_calls(), 0);
    // INFO / CONFIG / PING and a new connection's CLIENT SETINFO don't count.
    server.cmd(&["PING"]);
    let mut conn = server.conn();
    assert_eq!(server.command_calls(), 0);
    assert_eq!(server.command_calls(), 0);

    let _: () = redis::cmd("SET")
        .arg("a")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(server.command_calls(), 1);
    let _: Option<String> = redis::cmd("GET").arg("a").query(&mut conn).unwrap();
    assert_eq!(server.command_calls(), 2);
    // A rejected command (wrong arity) is counted too.
    assert!(server.try_cmd(&["GET"]).is_err());
    assert_eq!(server.command_calls(), 3);
    // Commands run by a script count, plus the EVAL itself.
    server.cmd(&["EVAL", "return redis.call('GET', KEYS[1])", "1", "a"]);
    assert_eq!(server.command_calls(), 5);

    server.reset_stats();
    assert_eq!(server.command_calls(), 0);
}

#[test]
fn proxy_pass_forwards_both_directions() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    assert_eq!(
        proxy.url(),
        format!("redis://127.0.0.1:{}", proxy.addr().port())
    );
    assert_eq!(proxy.mode(), ProxyMode::Pass);
    let mut conn = connect(&proxy.url(), Duration::from_secs(2));
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("via-proxy")
        .query(&mut conn)
        .unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "via-proxy");
    assert_eq!(
        server.query::<Option<String>>(&["GET", "k"]).as_deref(),
        Some("via-proxy")
    );
    // A value bigger than one read chunk arrives intact.
    let big = "x".repeat(1 << 20);
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut conn)
        .unwrap();
    let back: String = redis::cmd("GET").arg("big").query(&mut conn).unwrap();
    assert_eq!(back, big);
    assert_eq!(proxy.connections(), 1);
    assert_eq!(proxy.accepted(), 1);

    drop(conn);
    assert!(
        eventually(Duration::from_secs(2), || proxy.connections() == 0),
        "closing the client closes the proxied connection"
    );
}

#[test]
fn proxy_drop_replies_executes_but_client_times_out() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut conn = connect(&proxy.url(), Duration::from_millis(200));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(ProxyMode::DropReplies);
    let err = redis::cmd("SET")
        .arg("k")
        .arg("landed")
        .query::<()>(&mut conn)
        .unwrap_err();
    assert!(err.is_timeout(), "expected a read timeout, got {err:?}");
    assert!(
        eventually(Duration::from_secs(2), || {
            server.query::<Option<String>>(&["GET", "k"]).as_deref() == Some("landed")
        }),
        "the request still reached redis"
    );

    // Back to Pass: a new connection works again.
    proxy.set_mode(ProxyMode::Pass);
    let mut conn = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn proxy_drop_requests_and_black_hole_never_reach_redis() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut conn = connect(&proxy.url(), Duration::from_millis(150));
    server.reset_stats();

    for mode in [ProxyMode::DropRequests, ProxyMode::BlackHole] {
        proxy.set_mode(mode);
        let err = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query::<()>(&mut conn)
            .unwrap_err();
        assert!(
            err.is_timeout(),
            "{mode:?}: expected a timeout, got {err:?}"
        );
        // The connection is out of sync after a timeout; use a fresh one.
        proxy.set_mode(ProxyMode::Pass);
        conn = connect(&proxy.url(), Duration::from_millis(150));
    }
    assert_eq!(server.command_calls(), 0);
    assert_eq!(server.query::<Option<String>>(&["GET", "k"]), None);
}

#[test]
fn proxy_delay_holds_each_direction() {
    // Long enough that each bound below leaves a whole D for a starved scheduler: what is
    // told apart is 2·D from 4·D (serialised), not 2·D from 2·D plus a quiet machine.
    const D: Duration = Duration::from_millis(500);
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut conn = connect(&proxy.url(), Duration::from_secs(5));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(ProxyMode::Delay(D));
    let start = Instant::now();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let round_trip = start.elapsed();
    assert!(round_trip >= 2 * D, "round trip took {round_trip:?}");
    assert!(round_trip < 2 * D + D, "round trip took {round_trip:?}");

    // Chunks are queued with timestamps, not serialised: two requests sent
    // 20 ms apart both get their replies after about 2 * D + 20 ms (serialised: 4 * D).
    let mut raw = TcpStream::connect(proxy.addr()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let start = Instant::now();
    raw.write_all(b"PING\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    raw.write_all(b"PING\r\n").unwrap();
    let mut got = Vec::new();
    while got.len() < b"+PONG\r\n+PONG\r\n".len() {
        let mut buf = [0u8; 64];
        let n = raw.read(&mut buf).unwrap();
        assert!(n > 0, "unexpected EOF");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"+PONG\r\n+PONG\r\n");
    let both = start.elapsed();
    assert!(both >= 2 * D, "took {both:?}");
    assert!(both < 3 * D, "took {both:?}: chunks were serialised");

    // Back to Pass: no delay any more.
    proxy.set_mode(ProxyMode::Pass);
    let start = Instant::now();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    assert!(start.elapsed() < D, "took {:?}", start.elapsed());
}

#[test]
fn proxy_reset_all_breaks_open_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut a = connect(&proxy.url(), Duration::from_secs(2));
    let mut b = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut a).unwrap(), "PONG");
    assert_eq!(ping(&mut b).unwrap(), "PONG");
    assert_eq!(proxy.connections(), 2);

    proxy.reset_all();
    assert_eq!(proxy.connections(), 0);
    let err = ping(&mut a).unwrap_err();
    assert!(
        err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error(),
        "expected a disconnect, got {err:?}"
    );
    assert!(ping(&mut b).is_err());

    // The proxy still accepts new connections.
    let mut c = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut c).unwrap(), "PONG");
    assert_eq!(proxy.accepted(), 3);
}

#[test]
fn proxy_stop_listening_refuses_and_start_listening_rebinds() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut open = connect(&proxy.url(), Duration::from_secs(2));
    let addr = proxy.addr();

    proxy.stop_listening();
    assert!(!proxy.is_listening());
    let err = TcpStream::connect(addr).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    match redis::Client::open(proxy.url()).unwrap().get_connection() {
        Ok(_) => panic!("connect must be refused"),
        Err(err) => assert!(err.is_connection_refusal(), "{err:?}"),
    }
    // Already open connections keep working.
    assert_eq!(ping(&mut open).unwrap(), "PONG");

    proxy.start_listening();
    assert_eq!(proxy.addr(), addr);
    let mut conn = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn proxy_refuse_mode_closes_new_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut open = connect(&proxy.url(), Duration::from_secs(2));

    proxy.set_mode(ProxyMode::Refuse);
    let result = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2));
    assert!(result.is_err(), "connection setup must fail in Refuse mode");
    assert_eq!(proxy.accepted(), 2);
    assert_eq!(proxy.connections(), 1);
    // The connection opened before keeps forwarding.
    assert_eq!(ping(&mut open).unwrap(), "PONG");
}

#[test]
fn proxy_to_dead_upstream_closes_client() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    server.kill();
    let result = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2));
    assert!(result.is_err());
    assert_eq!(proxy.connections(), 0);
    assert_eq!(proxy.accepted(), 1);
}

#[test]
fn proxy_drop_is_prompt_with_open_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let mut conn = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    // A chunk held in a writer's queue must not delay the drop.
    proxy.set_mode(ProxyMode::Delay(Duration::from_secs(30)));
    let mut raw = TcpStream::connect(proxy.addr()).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    assert!(eventually(Duration::from_secs(1), || proxy.connections() == 2));
    let addr = proxy.addr();
    let start = Instant::now();
    drop(proxy);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert!(ping(&mut conn).is_err());
    assert_eq!(
        TcpStream::connect(addr).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
}

#[test]
fn persistent_restart_keeps_data() {
    let mut server = RedisServer::start_persistent();
    let aof: Vec<String> = server.query(&["CONFIG", "GET", "appendonly"]);
    assert_eq!(aof, ["appendonly", "yes"]);
    server.cmd(&["SET", "durable", "yes"]);
    let (port, pid) = (server.port(), server.pid());

    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert!(!pid_alive(pid));
    assert_eq!(
        server
            .query::<Option<String>>(&["GET", "durable"])
            .as_deref(),
        Some("yes")
    );

    // appendfsync always: even SIGKILL loses nothing that was acknowledged.
    server.cmd(&["SET", "after-kill", "1"]);
    server.kill();
    server.restart();
    assert_eq!(
        server
            .query::<Option<String>>(&["GET", "after-kill"])
            .as_deref(),
        Some("1")
    );
}

#[test]
fn non_persistent_restart_loses_data() {
    let mut server = RedisServer::start();
    server.cmd(&["SET", "k", "v"]);
    server.restart();
    assert_eq!(server.query::<Option<String>>(&["GET", "k"]), None);
}

#[test]
fn kill_and_stop_make_the_port_refuse() {
    let mut server = RedisServer::start();
    let addr = server.addr();
    let pid = server.pid();
    server.kill();
    assert!(!server.is_running());
    assert!(!pid_alive(pid), "killed process was reaped");
    assert_eq!(
        TcpStream::connect(addr).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
    assert!(server.try_cmd(&["PING"]).is_err());

    server.restart();
    assert!(server.is_running());
    let pid = server.pid();
    server.stop();
    assert!(!server.is_running());
    assert!(!pid_alive(pid));
    assert_eq!(
        TcpStream::connect(addr).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
}

#[test]
fn pause_and_resume() {
    let server = RedisServer::start();
    let mut conn = connect(&server.url(), Duration::from_millis(150));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    server.pause();
    assert!(server.is_paused());
    assert!(server.is_running());
    let err = ping(&mut conn).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    server.resume();
    assert!(!server.is_paused());
    let mut conn = connect(&server.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn drop_kills_the_process_and_removes_the_dir() {
    let server = RedisServer::start_persistent();
    server.cmd(&["SET", "k", "v"]);
    server.pause();
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    assert!(dir.join("redis.log").exists());
    drop(server);
    assert!(!pid_alive(pid), "no zombie left behind");
    assert!(!dir.exists());
}
