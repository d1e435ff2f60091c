//! The order in which the server ran what it was sent: a `MONITOR` connection read on a
//! thread of its own, from its start to a marker command.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::thread::{self, JoinHandle};

use crate::common::RedisServer;

/// Every command the server runs from now on, one line each, until [`Monitor::finish`].
pub struct Monitor {
    marker: String,
    lines: JoinHandle<Vec<String>>,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Monitor {
        let mut stream = TcpStream::connect(server.addr()).expect("connect for MONITOR");
        stream
            .write_all(b"*1\r\n$7\r\nMONITOR\r\n")
            .expect("send MONITOR");
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR's reply");
        assert_eq!(ok, "+OK\r\n", "MONITOR refused");
        let marker = format!("monitor-end-{}", std::process::id());
        let end = marker.clone();
        let lines = thread::spawn(move || {
            let mut lines = Vec::new();
            for line in reader.lines() {
                let line = line.expect("a MONITOR line");
                if line.contains(&end) {
                    break;
                }
                lines.push(line);
            }
            lines
        });
        Monitor { marker, lines }
    }

    /// Everything the server ran up to now, in its order.
    pub fn finish(self, server: &RedisServer) -> Vec<String> {
        server.cmd(&["ECHO", &self.marker]);
        self.lines.join().expect("the MONITOR thread")
    }
}
