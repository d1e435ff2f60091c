//! A loopback TCP proxy in front of one upstream address (usually a
//! [`RedisServer`](super::RedisServer)), for injecting network faults.
//!
//! Everything runs on std threads: one accept thread, and per connection a
//! reader and a writer thread for each direction. Readers poll with a 20 ms
//! read timeout, so mode changes, `reset_all` and drop are noticed promptly.
//! Data read in one direction goes through a queue to that direction's
//! writer, stamped with the time it may be written; this keeps the byte
//! order intact when the mode changes from `Delay` back to `Pass`.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Read/write poll interval of the forwarding threads.
const POLL: Duration = Duration::from_millis(20);
/// Poll interval of the (non-blocking) accept loop.
const ACCEPT_POLL: Duration = Duration::from_millis(2);
/// Timeout for connecting to the upstream.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Upper bound for joining threads in `reset_all` and `Drop`.
const JOIN_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `start_listening` retries binding the same port.
const REBIND_TIMEOUT: Duration = Duration::from_secs(5);

/// What the proxy does with traffic. Takes effect immediately, also for
/// connections that are already open (decided per chunk as it is read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward both directions.
    Pass,
    /// Hold every chunk for the given time before forwarding it (both
    /// directions; a request/reply round trip gets twice the delay).
    Delay(Duration),
    /// Discard upstream -> client bytes. Requests still reach the upstream
    /// and execute; the client never sees the replies.
    DropReplies,
    /// Discard client -> upstream bytes.
    DropRequests,
    /// Discard both directions; the sockets stay open.
    BlackHole,
    /// Accept new connections and close them immediately (the client sees
    /// EOF, not ECONNREFUSED; see [`Proxy::stop_listening`] for that).
    /// Connections that are already open keep forwarding as in `Pass`.
    Refuse,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Client -> upstream (requests).
    Up,
    /// Upstream -> client (replies).
    Down,
}

impl ProxyMode {
    /// `Some(delay)`: forward after `delay`; `None`: discard.
    fn action(self, dir: Direction) -> Option<Duration> {
        match (self, dir) {
            (ProxyMode::Pass | ProxyMode::Refuse, _) => Some(Duration::ZERO),
            (ProxyMode::Delay(d), _) => Some(d),
            (ProxyMode::DropReplies, Direction::Up) => Some(Duration::ZERO),
            (ProxyMode::DropRequests, Direction::Down) => Some(Duration::ZERO),
            (ProxyMode::DropReplies, Direction::Down)
            | (ProxyMode::DropRequests, Direction::Up)
            | (ProxyMode::BlackHole, _) => None,
        }
    }
}

/// A running proxy; stops all its threads and connections on drop.
pub struct Proxy {
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: SocketAddr,
    addr: SocketAddr,
    mode: Mutex<ProxyMode>,
    stopping: AtomicBool,
    listener: Mutex<Option<TcpListener>>,
    conns: Mutex<Vec<ConnEntry>>,
    open: AtomicUsize,
    accepted: AtomicUsize,
}

struct ConnEntry {
    conn: Arc<Conn>,
    threads: Vec<JoinHandle<()>>,
}

/// One proxied connection: the accepted client socket and the upstream one.
struct Conn {
    client: TcpStream,
    upstream: TcpStream,
    closed: AtomicBool,
    /// Writer threads still running; the connection counts as open until
    /// both have finished.
    live_writers: AtomicUsize,
}

impl Conn {
    /// Closes both sockets in both directions; all four threads notice.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn source(&self, dir: Direction) -> &TcpStream {
        match dir {
            Direction::Up => &self.client,
            Direction::Down => &self.upstream,
        }
    }

    fn sink(&self, dir: Direction) -> &TcpStream {
        match dir {
            Direction::Up => &self.upstream,
            Direction::Down => &self.client,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards every accepted connection to
    /// `upstream`, starting in [`ProxyMode::Pass`].
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("proxy: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("proxy: set_nonblocking");
        let addr = listener.local_addr().expect("proxy: local_addr");
        let shared = Arc::new(Shared {
            upstream,
            addr,
            mode: Mutex::new(ProxyMode::Pass),
            stopping: AtomicBool::new(false),
            listener: Mutex::new(Some(listener)),
            conns: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_thread = thread::Builder::new()
            .name(format!("proxy-accept-{}", addr.port()))
            .spawn(move || accept_loop(&accept_shared))
            .expect("proxy: spawn accept thread");
        Proxy {
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// The proxy's listening address (stays the same across
    /// `stop_listening` / `start_listening`).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `redis://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.shared.addr.port())
    }

    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    pub fn set_mode(&self, mode: ProxyMode) {
        *lock(&self.shared.mode) = mode;
    }

    pub fn mode(&self) -> ProxyMode {
        *lock(&self.shared.mode)
    }

    /// Closes every open connection now (both halves of both sockets): the
    /// client and the upstream see EOF. Returns once the connections'
    /// threads have finished (bounded), so `connections()` is 0 afterwards.
    /// New connections are accepted as before.
    pub fn reset_all(&self) {
        let entries: Vec<ConnEntry> = std::mem::take(&mut *lock(&self.shared.conns));
        for entry in &entries {
            entry.conn.close();
        }
        join_all(entries.into_iter().flat_map(|e| e.threads), JOIN_TIMEOUT);
    }

    /// Closes the listening socket: new connects fail with ECONNREFUSED.
    /// Open connections are not affected (use `reset_all` for those).
    pub fn stop_listening(&self) {
        drop(lock(&self.shared.listener).take());
    }

    /// Binds the same port again after `stop_listening` (retrying for up
    /// to 5 s if the port is briefly unavailable). No-op if listening.
    pub fn start_listening(&self) {
        let mut guard = lock(&self.shared.listener);
        if guard.is_some() {
            return;
        }
        let deadline = Instant::now() + REBIND_TIMEOUT;
        let listener = loop {
            match TcpListener::bind(self.shared.addr) {
                Ok(l) => break l,
                Err(e) if Instant::now() >= deadline => {
                    panic!("proxy: cannot re-bind {}: {e}", self.shared.addr)
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        };
        listener
            .set_nonblocking(true)
            .expect("proxy: set_nonblocking");
        *guard = Some(listener);
    }

    pub fn is_listening(&self) -> bool {
        lock(&self.shared.listener).is_some()
    }

    /// Connections currently open (proxied to the upstream).
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Total connections accepted, including ones closed at once in
    /// `Refuse` mode or because the upstream could not be reached.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        drop(lock(&self.shared.listener).take());
        let entries: Vec<ConnEntry> = std::mem::take(&mut *lock(&self.shared.conns));
        for entry in &entries {
            entry.conn.close();
        }
        let threads = entries
            .into_iter()
            .flat_map(|e| e.threads)
            .chain(self.accept_thread.take());
        join_all(threads, JOIN_TIMEOUT);
        // A connection accepted concurrently with the drop may have been
        // registered after we took the list.
        for entry in std::mem::take(&mut *lock(&self.shared.conns)) {
            entry.conn.close();
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.shared.addr)
            .field("upstream", &self.shared.upstream)
            .field("mode", &self.mode())
            .field("connections", &self.connections())
            .finish()
    }
}

/// Joins the threads that finish before `timeout`; the rest are detached
/// (they exit on their own once they notice the closed sockets).
fn join_all(threads: impl IntoIterator<Item = JoinHandle<()>>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    for handle in threads {
        while !handle.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        if handle.is_finished() {
            let _ = handle.join();
        }
    }
}

fn accept_loop(shared: &Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        let accepted = match lock(&shared.listener).as_ref() {
            Some(listener) => listener.accept(),
            None => Err(ErrorKind::WouldBlock.into()),
        };
        match accepted {
            Ok((stream, _)) => handle_accepted(shared, stream),
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

fn handle_accepted(shared: &Arc<Shared>, client: TcpStream) {
    shared.accepted.fetch_add(1, Ordering::SeqCst);
    if *lock(&shared.mode) == ProxyMode::Refuse {
        drop(client);
        return;
    }
    let Ok(upstream) = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT)
    else {
        drop(client);
        return;
    };
    let setup = |s: &TcpStream| -> std::io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(POLL))
    };
    if setup(&client).is_err() || setup(&upstream).is_err() {
        return;
    }
    let conn = Arc::new(Conn {
        client,
        upstream,
        closed: AtomicBool::new(false),
        live_writers: AtomicUsize::new(2),
    });
    shared.open.fetch_add(1, Ordering::SeqCst);

    let port = shared.addr.port();
    let mut threads = Vec::with_capacity(4);
    for dir in [Direction::Up, Direction::Down] {
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
        let (c, s) = (Arc::clone(&conn), Arc::clone(shared));
        let name = format!("proxy-{port}-{dir:?}-read");
        threads.push(
            thread::Builder::new()
                .name(name)
                .spawn(move || read_loop(&s, &c, dir, &tx))
                .expect("proxy: spawn reader"),
        );
        let (c, s) = (Arc::clone(&conn), Arc::clone(shared));
        let name = format!("proxy-{port}-{dir:?}-write");
        threads.push(
            thread::Builder::new()
                .name(name)
                .spawn(move || {
                    write_loop(&c, dir, &rx);
                    if c.live_writers.fetch_sub(1, Ordering::SeqCst) == 1 {
                        s.open.fetch_sub(1, Ordering::SeqCst);
                    }
                })
                .expect("proxy: spawn writer"),
        );
    }

    let mut conns = lock(&shared.conns);
    // Forget connections whose threads are all done.
    conns.retain_mut(|entry| {
        if entry.threads.iter().all(JoinHandle::is_finished) {
            for handle in entry.threads.drain(..) {
                let _ = handle.join();
            }
            false
        } else {
            true
        }
    });
    conns.push(ConnEntry { conn, threads });
    if shared.stopping.load(Ordering::SeqCst) {
        for entry in conns.iter() {
            entry.conn.close();
        }
    }
}

/// Reads from the direction's source and queues chunks for the writer (or
/// discards them, depending on the mode). Dropping `tx` on exit tells the
/// writer that the source reached EOF.
fn read_loop(shared: &Shared, conn: &Conn, dir: Direction, tx: &mpsc::Sender<(Instant, Vec<u8>)>) {
    let mut source = conn.source(dir);
    let mut buf = vec![0u8; 64 * 1024];
    while !conn.is_closed() && !shared.stopping.load(Ordering::SeqCst) {
        match source.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let now = Instant::now();
                let mode = *lock(&shared.mode);
                if let Some(delay) = mode.action(dir)
                    && tx.send((now + delay, buf[..n].to_vec())).is_err()
                {
                    return;
                }
            }
            Err(e) if is_retry(&e) => {}
            Err(_) => {
                conn.close();
                return;
            }
        }
    }
}

/// Writes queued chunks to the direction's sink once they are due. When
/// the reader has finished (EOF), propagates the half-close to the sink.
fn write_loop(conn: &Conn, dir: Direction, rx: &mpsc::Receiver<(Instant, Vec<u8>)>) {
    let mut sink = conn.sink(dir);
    while let Ok((due, data)) = rx.recv() {
        loop {
            if conn.is_closed() {
                return;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            thread::sleep((due - now).min(POLL));
        }
        let mut written = 0;
        while written < data.len() {
            if conn.is_closed() {
                return;
            }
            match sink.write(&data[written..]) {
                Ok(0) => {
                    conn.close();
                    return;
                }
                Ok(n) => written += n,
                Err(e) if is_retry(&e) => {}
                Err(_) => {
                    conn.close();
                    return;
                }
            }
        }
    }
    if !conn.is_closed() {
        let _ = sink.shutdown(Shutdown::Write);
    }
}

fn is_retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
