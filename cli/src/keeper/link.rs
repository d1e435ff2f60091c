//! leasehold's side of the keeper, inside the async runtime: orders out, events in, and
//! leasehold's own kill of the command's tree beside the keeper's.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::FuseEnds;
use super::fuse::Arming;
use super::namespace::Containment;
use super::tree;
use super::wire::Nanos;
use super::wire::{Event, FRAME, Order, Signal};
use super::{Detachment, to_nanos};

/// leasehold's side of the keeper, inside the async runtime.
#[derive(Debug)]
pub(crate) struct KeeperLink {
    /// leasehold's child: the keeper, or the fuse above it in a namespace.
    pid: libc::pid_t,
    orders: Option<pipe::Sender>,
    events: pipe::Receiver,
    /// The fuse's pipes, in a namespace.
    fuse: Option<FuseLink>,
    containment: Containment,
    /// The last local validity end sent: the fuse's timer fires there.
    last_deadline: Option<Instant>,
    /// The events pipe ended.
    closed: bool,
    /// leasehold's own walk found nothing of the command left.
    tree_gone: bool,
    /// The command's process group (its pid), from `Started` until `Exited`: signalled
    /// first when leasehold kills the tree, before the walk. Never in a namespace, whose
    /// pids are not the host's.
    command_group: Option<u32>,
}

/// leasehold's side of the fuse: deadlines out; whether it armed its timer, once.
#[derive(Debug)]
struct FuseLink {
    deadlines: pipe::Sender,
    /// Read once, when the command is to start.
    armed: Option<pipe::Receiver>,
}

/// The command was not started: nothing confirmed that the kernel would end its tree at
/// local validity's end, should leasehold, the fuse and the keeper all be frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unarmed {
    /// The fuse did not say it armed its timer before the deadline it was given (it is
    /// stopped or starved).
    #[error("the fuse (pid {pid}) did not arm its timer before local validity's end")]
    Late { pid: libc::pid_t },
    /// The fuse ended without saying it.
    #[error("the fuse (pid {pid}) ended before it armed its timer")]
    Gone { pid: libc::pid_t },
}

impl KeeperLink {
    /// The link over the keeper's pipes (orders, events), and the fuse's in a namespace.
    pub(super) fn new(
        pid: libc::pid_t,
        (orders, events): (OwnedFd, OwnedFd),
        fuse: Option<FuseEnds>,
        containment: Containment,
    ) -> io::Result<KeeperLink> {
        let fuse = match fuse {
            Some(FuseEnds { deadlines, armed }) => Some(FuseLink {
                deadlines: pipe::Sender::from_owned_fd(deadlines)?,
                armed: Some(pipe::Receiver::from_owned_fd(armed)?),
            }),
            None => None,
        };
        Ok(KeeperLink {
            pid,
            orders: Some(pipe::Sender::from_owned_fd(orders)?),
            events: pipe::Receiver::from_owned_fd(events)?,
            fuse,
            containment,
            last_deadline: None,
            closed: false,
            tree_gone: false,
            command_group: None,
        })
    }

    /// Sends an order. An error means the keeper is gone, which [`next_event`] reports.
    ///
    /// [`next_event`]: Self::next_event
    pub(crate) async fn send(&mut self, order: Order) {
        if let Some(orders) = &mut self.orders {
            let _ = orders.write_all(&order.encode()).await;
        }
    }

    /// Start the command (under a counted lease, with its slot); nothing of it may run past
    /// `deadline`. In a namespace, only once the fuse said its timer is armed: it is what
    /// ends the tree when every leasehold process is frozen, and a fuse frozen or starved
    /// since before the grant would never have read the deadline. Waits for that until
    /// `deadline` at most; then the command is not started.
    ///
    /// # Errors
    /// [`Unarmed`]: the fuse did not say so by `deadline`, or ended first.
    pub(crate) async fn start(
        &mut self,
        token: u64,
        slot: Option<u16>,
        deadline: Instant,
    ) -> Result<(), Unarmed> {
        let at = to_nanos(deadline);
        self.arm_fuse(deadline, at).await;
        self.fuse_armed(deadline).await?;
        if let Some(slot) = slot {
            self.send(Order::Slot(slot)).await;
        }
        self.send(Order::Start {
            token,
            deadline: at,
        })
        .await;
        Ok(())
    }

    /// Waits, until `deadline` at most, for the fuse to say it armed its timer.
    async fn fuse_armed(&mut self, deadline: Instant) -> Result<(), Unarmed> {
        let pid = self.pid;
        let Some(mut armed) = self.fuse.as_mut().and_then(|fuse| fuse.armed.take()) else {
            return Ok(());
        };
        let mut byte = [0u8; 1];
        let said = tokio::time::timeout_at(deadline, armed.read_exact(&mut byte)).await;
        let armed = match said {
            Err(_) => Err(Unarmed::Late { pid }),
            Ok(Err(_)) => Err(Unarmed::Gone { pid }),
            Ok(Ok(_)) => match Arming::decode(byte[0]) {
                Some(Arming::Armed) => Ok(()),
                Some(Arming::NoTimer) => {
                    tracing::warn!(
                        "the kernel refused the fuse a timer: leasehold and the keeper \
                         enforce local validity's end alone (all of leasehold's processes \
                         frozen at once would go unanswered)"
                    );
                    Ok(())
                }
                None => Err(Unarmed::Gone { pid }),
            },
        };
        // Not armed, the command is never started: nothing of it is left, and a fuse that
        // has not answered by now is stopped — `finish` need not wait for it.
        self.tree_gone = armed.is_err();
        armed
    }

    /// The local validity end moved.
    pub(crate) async fn deadline(&mut self, at: Instant) {
        let nanos = to_nanos(at);
        self.arm_fuse(at, nanos).await;
        self.send(Order::Deadline(nanos)).await;
    }

    /// The fuse's timer to `at` — before the keeper hears of it, so that the kernel's
    /// SIGKILL is never set later than what the keeper holds.
    async fn arm_fuse(&mut self, at: Instant, nanos: Nanos) {
        self.last_deadline = Some(at);
        if let Some(fuse) = &mut self.fuse {
            let _ = fuse.deadlines.write_all(&nanos.to_le_bytes()).await;
        }
    }

    /// What holds the command's tree.
    pub(crate) fn containment(&self) -> Containment {
        self.containment
    }

    /// Whether the keeper's end can be the fuse's timer: in a namespace, once the last
    /// deadline sent has passed.
    pub(crate) fn fuse_burnt(&self) -> bool {
        self.fuse.is_some() && self.last_deadline.is_some_and(|at| Instant::now() >= at)
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
                            Event::Started { .. } if self.containment != Containment::Subreaper => {
                                None
                            }
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
        // In a namespace the kernel does it whole: the fuse's end ends the keeper, whose
        // end ends every process in the namespace. The walk below then finds them dying.
        let spare = if self.fuse.is_some() {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
            None
        } else {
            u32::try_from(self.pid).ok()
        };
        loop {
            reap_any();
            let signalled = tree::signal_all(me, self.command_group, spare, Signal::Kill);
            let live: Vec<u32> = signalled
                .found
                .into_iter()
                .filter(|&pid| Some(pid) != spare)
                .collect();
            if live.is_empty() {
                self.tree_gone = true;
                return Killed {
                    most,
                    left: 0,
                    survivor: None,
                };
            }
            most = most.max(live.len());
            // A process the kernel refuses to let leasehold signal will not go however
            // long leasehold tries.
            let hopeless = live.iter().all(|pid| signalled.refused.contains(pid));
            if hopeless || Instant::now() >= until {
                let survivor = match signalled.refused.first() {
                    Some(&pid) => Survivor { pid, refused: true },
                    None => Survivor {
                        pid: live[0],
                        refused: false,
                    },
                };
                return Killed {
                    most,
                    left: live.len(),
                    survivor: Some(survivor),
                };
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Closes the orders pipe (and the fuse's: nothing is left to guard) and waits for the
    /// keeper to exit (it exits once nothing of the command is left); SIGKILLs it after
    /// `limit` — at once if leasehold saw the tree gone itself
    /// ([`kill_tree`](Self::kill_tree)), as a keeper that has not exited by then is
    /// stopped and has nothing left to keep.
    pub(crate) async fn finish(mut self, limit: Duration) {
        self.close();
        self.fuse = None;
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
    /// How many the last round still found, when `limit` ran out or every one of them
    /// refused the signal; 0: none is left.
    pub(crate) left: usize,
    /// One of those left: one that refused the signal if any did.
    pub(crate) survivor: Option<Survivor>,
}

/// A process of the command that leasehold's SIGKILL did not end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Survivor {
    pub(crate) pid: u32,
    /// The kernel refused the signal (EPERM: it runs as a user leasehold may not
    /// signal); otherwise it outlived the kill's time limit (stuck in the kernel).
    pub(crate) refused: bool,
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
