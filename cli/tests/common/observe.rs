//! What the CLI tests watch besides the binary's output: every command Redis executes
//! (`MONITOR`), every key and value, and a machine kept busy on purpose.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::RedisServer;
use super::cli::{POLL, READY_TIMEOUT, all_keys};

/// A `MONITOR` connection recording every command the server executes.
pub struct Monitor {
    buffer: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Monitor {
        let mut stream = TcpStream::connect(server.addr()).expect("connect for MONITOR");
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("set_read_timeout");
        stream
            .write_all(b"*1\r\n$7\r\nMONITOR\r\n")
            .expect("send MONITOR");
        let mut reply = Vec::new();
        let deadline = Instant::now() + READY_TIMEOUT;
        while !reply.starts_with(b"+OK\r\n") {
            assert!(Instant::now() < deadline, "MONITOR not acknowledged");
            let mut chunk = [0u8; 64];
            match stream.read(&mut chunk) {
                Ok(0) => panic!("MONITOR connection closed"),
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("MONITOR read: {e}"),
            }
        }
        let buffer = Arc::new(Mutex::new(reply[5..].to_vec()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (buffer, stop) = (Arc::clone(&buffer), Arc::clone(&stop));
            thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                while !stop.load(Ordering::SeqCst) {
                    match stream.read(&mut chunk) {
                        Ok(0) => return,
                        Ok(n) => buffer
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .extend_from_slice(&chunk[..n]),
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => return,
                    }
                }
            })
        };
        Monitor {
            buffer,
            stop,
            thread: Some(thread),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Everything recorded up to a marker command sent now (so nothing before it is missed).
    pub fn finish(mut self, server: &RedisServer) -> String {
        let marker = format!("monitor-end-{}", std::process::id());
        server.cmd(&["ECHO", &marker]);
        let deadline = Instant::now() + READY_TIMEOUT;
        while !self.text().contains(&marker) {
            assert!(Instant::now() < deadline, "MONITOR never showed the marker");
            thread::sleep(POLL);
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.text()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every key with its type and value, as text.
pub fn dump_redis(server: &RedisServer) -> String {
    let mut out = String::new();
    for key in all_keys(server) {
        let kind: String = server.query(&["TYPE", &key]);
        let value = match kind.as_str() {
            "hash" => {
                let fields: Vec<String> = server.query(&["HGETALL", &key]);
                fields.join(" ")
            }
            "string" => server.query::<String>(&["GET", &key]),
            other => panic!("unexpected key type {other} for {key}"),
        };
        out.push_str(&format!("{key} ({kind}): {value}\n"));
    }
    out
}

/// Threads spinning on every core until dropped (at most 10 s).
pub struct CpuLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl CpuLoad {
    pub fn start() -> CpuLoad {
        let cores = thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let until = Instant::now() + Duration::from_secs(10);
                    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        CpuLoad { stop, threads }
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
