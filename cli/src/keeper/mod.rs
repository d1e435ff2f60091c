//! The keeper: the process between leasehold and the command that makes sure nothing of
//! the command runs outside the lease.
//!
//! ```text
//! in a PID namespace (the default where the host allows it):
//! leasehold ──deadlines──▶ fuse ─▶ keeper = the namespace's init ─▶ command … descendants
//!     └──────orders / events──────────▶┘
//! without one (--pid-namespace off, or a host that refuses it):
//! leasehold ──orders / events──▶ keeper (child subreaper) ─▶ command … descendants
//! ```
//!
//! leasehold forks before it starts its async runtime. The keeper starts the command when
//! told (with a parent-death SIGKILL, and `no_new_privs` unless `--allow-new-privileges`),
//! reaps the tree, and reports when the command exited and when nothing of it is left,
//! which is when leasehold releases the lease. It holds the lease's local validity end as
//! a deadline and SIGKILLs the whole tree there on its own, so a leasehold that is paused
//! or starved cannot let the command outlive the lease; and when leasehold dies the orders
//! pipe closes and the keeper SIGKILLs the tree at once.
//!
//! In a PID namespace ([`namespace`]) the kernel holds the tree besides: the keeper is the
//! namespace's init, whose end ends every process in it, and it dies with the fuse
//! ([`fuse`]), which dies with leasehold and by its own kernel timer at local validity's
//! end. Whichever of the three is killed, in whatever order, or all frozen at once, the
//! tree ends without any of them running. Without a namespace the keeper is a child
//! subreaper, so every descendant of the command — backgrounded, double-forked, `setsid` —
//! stays in its tree, found through `/proc`; leasehold and the keeper killed together
//! leave what the command started outside its process group running.
//!
//! The keeper (and the fuse) leave leasehold's session (and so its process group) as soon
//! as they are forked: a signal sent to leasehold's whole process group — `kill -KILL
//! -PGID`, `timeout -s KILL`, a supervisor's kill-as-group, a SIGSTOP of the job — reaches
//! leasehold and not the keeper, which goes on enforcing: leasehold killed ends the tree,
//! and leasehold stopped lets the deadline come.
//!
//! Outside Linux there is no namespace, subreaper, parent-death signal or `/proc`: the
//! keeper still enforces the deadline and kills on leasehold's death, but only through the
//! command's process group, which a `setsid` descendant leaves.

mod fuse;
mod link;
mod machine;
mod namespace;
mod pipe;
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

use tokio::time::Instant;

#[cfg(test)]
pub(crate) use link::Survivor;
pub(crate) use link::{KeeperLink, Killed, Unarmed};
pub(crate) use machine::{Leftovers, Policy};
pub(crate) use namespace::{Containment, NewPrivileges, PidNamespace, Refusal};
pub(crate) use process::Spec;
pub(crate) use wire::{Event, Order, Signal};

use wire::Nanos;

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

/// What this host lets `leasehold run` enforce on a command's process tree, for `doctor`,
/// from [`namespace::probe`]'s answer: whether it is all of it, and one line saying what.
pub(crate) fn host_enforcement(probe: &Result<Option<Containment>, Refusal>) -> (bool, String) {
    if let Ok(Some(containment)) = probe {
        return (true, format!("process tree: {}", containment.describe()));
    }
    let why = match probe {
        Err(refusal) => format!("no PID namespace for the command ({refusal}); "),
        _ => String::new(),
    };
    #[cfg(target_os = "linux")]
    {
        let mut subreaper: libc::c_int = 0;
        // SAFETY: prctl writes one int through the pointer it is given.
        let prctl = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &raw mut subreaper) };
        if prctl == 0 && std::fs::metadata("/proc/self/stat").is_ok() {
            return (
                false,
                format!(
                    "process tree: {why}{}; a signal to leasehold's process group (KILL, STOP) \
                     leaves the keeper enforcing (--pid-namespace require refuses to run here)",
                    Containment::Subreaper.describe()
                ),
            );
        }
    }
    (
        false,
        format!(
            "process tree: {why}no child subreaper or /proc here: the keeper kills the \
             command's process group only, which a setsid descendant leaves"
        ),
    )
}

/// [`namespace::probe`], for `doctor`: call it while the process has one thread.
pub(crate) fn probe_namespace() -> Result<Option<Containment>, Refusal> {
    namespace::probe()
}

/// leasehold's ends of the fuse's pipes: deadlines out, [`fuse::Arming`] in.
#[derive(Debug)]
pub(crate) struct FuseEnds {
    pub(crate) deadlines: OwnedFd,
    pub(crate) armed: OwnedFd,
}

/// The keeper process, as leasehold holds it before its async runtime starts.
#[derive(Debug)]
pub(crate) struct Keeper {
    /// leasehold's child: the keeper, or the fuse above it in a namespace.
    pid: libc::pid_t,
    orders: OwnedFd,
    events: OwnedFd,
    /// The fuse's pipes, in a namespace.
    fuse: Option<FuseEnds>,
    containment: Containment,
    /// Why `--pid-namespace auto` ran without a namespace, when it tried one.
    refusal: Option<Refusal>,
}

impl Keeper {
    /// Forks the keeper — in a PID namespace of its own, under the fuse, where `spec` asks
    /// for one and the host allows it. Call it while the process has one thread: the
    /// children go on to run plain Rust, which a fork of a multi-threaded process could not
    /// safely do.
    ///
    /// leasehold becomes a child subreaper too: should the keeper ever die, the command's
    /// orphans come to leasehold, which kills them ([`KeeperLink::kill_tree`]).
    ///
    /// # Errors
    /// [`StartError::Namespace`] under `--pid-namespace require` where no namespace can be
    /// had; [`StartError::Io`] when no process or pipe can be made.
    pub(crate) fn fork(spec: Spec) -> Result<Keeper, StartError> {
        set_child_subreaper();
        let refusal = match namespace::plan(spec.pid_namespace, spec.new_privileges)? {
            None => None,
            Some(user) => match Keeper::fork_fused(&spec, user)? {
                Ok(keeper) => return Ok(keeper),
                Err(refusal) if spec.pid_namespace == PidNamespace::Require => {
                    return Err(refusal.into());
                }
                Err(refusal) => Some(refusal),
            },
        };
        let mut keeper = Keeper::fork_plain(spec)?;
        keeper.refusal = refusal;
        Ok(keeper)
    }

    /// The keeper as leasehold's own child, a child subreaper.
    fn fork_plain(spec: Spec) -> io::Result<Keeper> {
        let (orders_read, orders_write) = pipe::pipe(false)?;
        let (events_read, events_write) = pipe::pipe(false)?;
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
                fuse: None,
                containment: Containment::Subreaper,
                refusal: None,
            }),
        }
    }

    /// The fuse as leasehold's child and the keeper as the init of a new PID namespace
    /// under it; waits (a millisecond or so) until the namespace is ready or refused.
    fn fork_fused(spec: &Spec, user: bool) -> io::Result<Result<Keeper, Refusal>> {
        let (orders_read, orders_write) = pipe::pipe(false)?;
        let (events_read, events_write) = pipe::pipe(false)?;
        let (deadlines_read, deadlines_write) = pipe::pipe(false)?;
        let (armed_read, armed_write) = pipe::pipe(false)?;
        let (ready_read, ready_write) = pipe::pipe(false)?;
        // SAFETY: getpid reads this process's id.
        let parent = unsafe { libc::getpid() };
        // SAFETY: single-threaded (the caller's promise); the child never returns from here.
        let pid = match unsafe { libc::fork() } {
            -1 => return Err(io::Error::last_os_error()),
            0 => {
                drop((
                    orders_write,
                    events_read,
                    deadlines_write,
                    armed_read,
                    ready_read,
                ));
                fuse::run(fuse::Setup {
                    spec: spec.clone(),
                    user,
                    parent,
                    orders: orders_read,
                    events: events_write,
                    deadlines: deadlines_read,
                    armed: armed_write,
                    ready: ready_write,
                })
            }
            pid => pid,
        };
        drop((
            orders_read,
            events_write,
            deadlines_read,
            armed_write,
            ready_write,
        ));
        let mut word = [0u8; 5];
        let said = std::io::Read::read_exact(&mut std::fs::File::from(ready_read), &mut word);
        let refusal = match said {
            Ok(()) => Refusal::decode(word),
            Err(_) => Some(Refusal {
                step: namespace::Step::Vanished,
                errno: 0,
            }),
        };
        if let Some(refusal) = refusal {
            let mut status = 0;
            // SAFETY: kill and waitpid on our own child, writing a local. The fuse may have
            // said why itself and exited, or be waiting for deadlines behind a keeper that
            // could not set up the namespace: it has nothing to guard either way.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &raw mut status, 0);
            }
            return Ok(Err(refusal));
        }
        Ok(Ok(Keeper {
            pid,
            orders: orders_write,
            events: events_read,
            fuse: Some(FuseEnds {
                deadlines: deadlines_write,
                armed: armed_read,
            }),
            containment: Containment::Namespace { user },
            refusal: None,
        }))
    }

    /// What holds the command's tree in this run, and why not a namespace when one was
    /// tried and refused.
    pub(crate) fn containment(&self) -> (Containment, Option<Refusal>) {
        (self.containment, self.refusal)
    }

    /// Talks to the keeper from the async runtime (call inside it).
    pub(crate) fn connect(self) -> io::Result<KeeperLink> {
        KeeperLink::new(
            self.pid,
            (self.orders, self.events),
            self.fuse,
            self.containment,
        )
    }
}

/// Why the keeper could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// `--pid-namespace require`, and this host gives none.
    #[error("{0}")]
    Namespace(#[from] Refusal),
    #[error("{0}")]
    Io(#[from] io::Error),
}
