//! The keeper: the process between leasehold and the command that makes sure nothing of
//! the command runs outside the lease.
//!
//! ```text
//! leasehold (lease, renewals, signals)  ──orders──▶  keeper (subreaper)  ──▶  command …
//!                                       ◀──events──                            └─ descendants
//! ```
//!
//! leasehold forks the keeper before it starts its async runtime. The keeper is a child
//! subreaper, so every descendant of the command — backgrounded, double-forked, `setsid` —
//! stays in its tree; it starts the command when told (with a parent-death SIGKILL), reaps
//! the tree, and reports when the command exited and when nothing of it is left, which is
//! when leasehold releases the lease. It holds the lease's local validity end as a
//! deadline and SIGKILLs the whole tree there on its own, so a leasehold that is paused or
//! starved cannot let the command outlive the lease; and when leasehold dies — SIGKILL,
//! OOM killer, crash — the orders pipe closes and the keeper SIGKILLs the tree at once.
//!
//! The keeper leaves leasehold's session (and so its process group) as soon as it is
//! forked: a signal sent to leasehold's whole process group — `kill -KILL -PGID`,
//! `timeout -s KILL`, a supervisor's kill-as-group, a SIGSTOP of the job — reaches leasehold
//! and not the keeper, which goes on enforcing: leasehold killed closes the orders pipe, and
//! leasehold stopped lets the deadline come.
//!
//! Outside Linux there is no subreaper, parent-death signal or `/proc`: the keeper still
//! enforces the deadline and kills on leasehold's death, but only through the command's
//! process group, which a `setsid` descendant leaves.

mod machine;
mod process;
mod tree;
mod wire;

#[cfg(test)]
mod machine_props;
#[cfg(test)]
mod machine_tests;

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::unix::pipe;
use tokio::time::Instant;

pub(crate) use machine::{Leftovers, Policy};
pub(crate) use process::Spec;
pub(crate) use wire::{Event, Order, Signal};

use machine::Nanos;
use wire::FRAME;

/// Serialises the tests of this binary that start child processes: the keeper loop under
/// test reaps every child of the test process.
#[cfg(test)]
pub(crate) static TEST_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock both processes read.
fn mono_now() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts);
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// `at` (tokio's clock, which is `CLOCK_MONOTONIC` outside paused tests) on the keeper's
/// clock. The monotonic clock is read first, so the result errs early, never late.
fn to_nanos(at: Instant) -> Nanos {
    let mono = mono_now();
    let now = Instant::now();
    if at >= now {
        mono.saturating_add(nanos(at - now))
    } else {
        mono.saturating_sub(nanos(now - at))
    }
}

/// A duration in whole nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Descendants orphaned anywhere below this process are re-parented to it, not to init.
fn set_child_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
}

/// Where the keeper runs, seen from leasehold: what a signal sent to leasehold's whole
/// process group leaves enforcing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detachment {
    /// A session of its own (the usual case): neither a group signal nor the end of
    /// leasehold's session reaches it.
    Session,
    /// A process group of its own in leasehold's session (`setsid` was refused).
    Group,
    /// leasehold's process group: a signal to the group stops or kills the keeper too.
    None,
}

impl Detachment {
    /// Words for the debug log and `doctor`.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Detachment::Session => {
                "the keeper runs in a session of its own: a signal to leasehold's process \
                 group (KILL, STOP, TERM) leaves it enforcing"
            }
            Detachment::Group => {
                "the keeper runs in a process group of its own: a signal to leasehold's \
                 process group leaves it enforcing"
            }
            Detachment::None => {
                "the keeper shares leasehold's process group: a SIGKILL or SIGSTOP of the \
                 whole group reaches it too"
            }
        }
    }
}

/// What this host lets `leasehold run` enforce on a command's process tree, for `doctor`:
/// whether it is all of it, and one line saying what.
pub(crate) fn host_enforcement() -> (bool, &'static str) {
    #[cfg(target_os = "linux")]
    {
        let mut subreaper: libc::c_int = 0;
        // SAFETY: prctl writes one int through the pointer it is given.
        let prctl = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &raw mut subreaper) };
        if prctl == 0 && std::fs::metadata("/proc/self/stat").is_ok() {
            return (
                true,
                "process tree: the keeper runs in a session of its own, so a signal to \
                 leasehold's process group (KILL, STOP) leaves it enforcing; it is a child \
                 subreaper that finds every descendant through /proc, and the command dies \
                 with it (parent-death SIGKILL)",
            );
        }
    }
    (
        false,
        "process tree: no child subreaper or /proc here: the keeper kills the command's \
         process group only, which a setsid descendant leaves",
    )
}

/// The keeper process, as leasehold holds it before its async runtime starts.
#[derive(Debug)]
pub(crate) struct Keeper {
    pid: libc::pid_t,
    orders: OwnedFd,
    events: OwnedFd,
}

impl Keeper {
    /// Forks the keeper. Call it while the process has one thread: the child goes on to run
    /// plain Rust, which a fork of a multi-threaded process could not safely do.
    ///
    /// leasehold becomes a child subreaper too: should the keeper ever die, the command's
    /// orphans come to leasehold, which kills them ([`KeeperLink::kill_tree`]).
    pub(crate) fn fork(spec: Spec) -> io::Result<Keeper> {
        let (orders_read, orders_write) = process::pipe(false)?;
        let (events_read, events_write) = process::pipe(false)?;
        set_child_subreaper();
        // SAFETY: single-threaded (the caller's promise); the child never returns from here.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                process::detach();
                drop((orders_write, events_read));
                process::run(spec, orders_read, events_write)
            }
            pid => Ok(Keeper {
                pid,
                orders: orders_write,
                events: events_read,
            }),
        }
    }

    /// Talks to the keeper from the async runtime (call inside it).
    pub(crate) fn connect(self) -> io::Result<KeeperLink> {
        Ok(KeeperLink {
            pid: self.pid,
            orders: Some(pipe::Sender::from_owned_fd(self.orders)?),
            events: pipe::Receiver::from_owned_fd(self.events)?,
            closed: false,
            tree_gone: false,
            command_group: None,
        })
    }
}

/// leasehold's side of the keeper, inside the async runtime.
#[derive(Debug)]
pub(crate) struct KeeperLink {
    pid: libc::pid_t,
    orders: Option<pipe::Sender>,
    events: pipe::Receiver,
    /// The events pipe ended.
    closed: bool,
    /// leasehold's own walk found nothing of the command left.
    tree_gone: bool,
    /// The command's process group (its pid), from `Started` until `Exited`: signalled
    /// first when leasehold kills the tree, before the walk.
    command_group: Option<u32>,
}

impl KeeperLink {
    /// Sends an order. An error means the keeper is gone, which [`next_event`] reports.
    ///
    /// [`next_event`]: Self::next_event
    pub(crate) async fn send(&mut self, order: Order) {
        if let Some(orders) = &mut self.orders {
            let _ = orders.write_all(&order.encode()).await;
        }
    }

    /// Start the command (under a counted lease, with its slot); nothing of it may run past
    /// `deadline`.
    pub(crate) async fn start(&mut self, token: u64, slot: Option<u16>, deadline: Instant) {
        if let Some(slot) = slot {
            self.send(Order::Slot(slot)).await;
        }
        self.send(Order::Start {
            token,
            deadline: to_nanos(deadline),
        })
        .await;
    }

    /// The local validity end moved.
    pub(crate) async fn deadline(&mut self, at: Instant) {
        self.send(Order::Deadline(to_nanos(at))).await;
    }

    /// How far the keeper stands from leasehold (read once it has started the command: it
    /// detaches before anything else).
    pub(crate) fn detachment(&self) -> Detachment {
        // SAFETY: getsid/getpgid read another process's ids; no memory is involved.
        let (session, group) = unsafe {
            (
                (libc::getsid(0), libc::getsid(self.pid)),
                (libc::getpgid(0), libc::getpgid(self.pid)),
            )
        };
        if session.0 != session.1 {
            Detachment::Session
        } else if group.0 != group.1 {
            Detachment::Group
        } else {
            Detachment::None
        }
    }

    /// The next event; `None` once the keeper is gone (after `Gone`, or if it died).
    ///
    /// # Cancel safety
    /// Cancel safe: a frame is read whole or not at all (frames are written atomically and
    /// the pipe is read exactly one frame at a time).
    pub(crate) async fn next_event(&mut self) -> Option<Event> {
        if self.closed {
            return std::future::pending().await;
        }
        let mut frame = [0u8; FRAME];
        loop {
            match self.events.read_exact(&mut frame).await {
                Ok(_) => {
                    if let Some(event) = Event::decode(&frame) {
                        self.command_group = match event {
                            Event::Started { pid } => Some(pid),
                            // Reaped: its pid, and so its group's id, may be reused once
                            // the group empties.
                            Event::Exited { .. } => None,
                            _ => self.command_group,
                        };
                        return Some(event);
                    }
                }
                Err(_) => {
                    self.closed = true;
                    return None;
                }
            }
        }
    }

    /// Closes the orders pipe: the keeper SIGKILLs whatever of the command is left, or, if
    /// it never started the command, exits.
    pub(crate) fn close(&mut self) {
        self.orders = None;
    }

    /// SIGKILLs the command's process group and every descendant of leasehold but the
    /// keeper — the command's tree, whether under the keeper or re-parented here because
    /// the keeper died — and again every few milliseconds until a round finds none left or
    /// `limit` passed (`ZERO`: one round).
    ///
    /// leasehold's own enforcement beside the keeper's: it runs at the instant the tree
    /// must be gone (the keeper may have been stopped) and when the keeper died. A process
    /// counts as left while it can run code: a zombie the (stopped) keeper has not reaped
    /// does not.
    pub(crate) async fn kill_tree(&mut self, limit: Duration) -> Killed {
        let me = std::process::id();
        let until = Instant::now() + limit;
        let mut most = 0;
        loop {
            reap_any();
            let keeper = u32::try_from(self.pid).ok();
            let round = tree::signal_all(me, self.command_group, keeper, Signal::Kill)
                .into_iter()
                .filter(|&pid| Some(pid) != keeper)
                .count();
            if round == 0 {
                self.tree_gone = true;
                return Killed { most, left: 0 };
            }
            most = most.max(round);
            if Instant::now() >= until {
                return Killed { most, left: round };
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Closes the orders pipe and waits for the keeper to exit (it exits once nothing of
    /// the command is left); SIGKILLs it after `limit` — at once if leasehold saw the
    /// tree gone itself ([`kill_tree`](Self::kill_tree)), as a keeper that has not
    /// exited by then is stopped and has nothing left to keep.
    pub(crate) async fn finish(mut self, limit: Duration) {
        self.close();
        let limit = if self.tree_gone {
            limit.min(STOPPED_KEEPER_LIMIT)
        } else {
            limit
        };
        let until = Instant::now() + limit;
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child, writing a local.
            let pid = unsafe { libc::waitpid(self.pid, &raw mut status, libc::WNOHANG) };
            if pid != 0 {
                return;
            }
            if Instant::now() >= until {
                // SAFETY: kill(2) on our own child.
                unsafe {
                    libc::kill(self.pid, libc::SIGKILL);
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// What [`KeeperLink::kill_tree`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Killed {
    /// The most processes one round found (and SIGKILLed).
    pub(crate) most: usize,
    /// How many the last round still found, when `limit` ran out; 0: none is left.
    pub(crate) left: usize,
}

/// How long a keeper gets to exit once leasehold found nothing of the tree left: a healthy
/// one exits within milliseconds; one that has not is stopped.
const STOPPED_KEEPER_LIMIT: Duration = Duration::from_millis(200);

/// Reaps every exited child of leasehold (orphans re-parented here) without waiting; the
/// keeper too, if it exited, which [`KeeperLink::finish`] then finds gone.
fn reap_any() {
    let mut status = 0;
    // SAFETY: waitpid writing a local.
    while unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) } > 0 {}
}
