//! The fuse: the process between leasehold and the keeper when the command's tree runs in
//! a PID namespace ([`super::namespace`]), whose death ends that namespace.
//!
//! ```text
//! leasehold ──deadlines──▶ fuse (kernel timer: SIGKILL to itself at the deadline)
//!     │ ◀──────armed─────── │
//!     │                     └─ keeper = the namespace's init (dies with the fuse)
//!     └──orders/events──────────▶  └─ command … (die with the keeper)
//! ```
//!
//! It carries a parent-death SIGKILL tied to leasehold, and the keeper carries one tied to
//! it: leasehold killed kills the fuse, the fuse killed kills the keeper, and the keeper's
//! end kills every process in the namespace. Its POSIX timer sends SIGKILL to the fuse
//! itself at local validity's end, re-armed at every renewal: the kernel delivers it even to
//! a stopped process, so leasehold, the fuse and the keeper all frozen (SIGSTOP) cannot keep
//! the command running past the lease — no process of leasehold's needs to run for the
//! tree to end.
//!
//! The timer stands behind the command only once the fuse has read the first deadline and
//! armed it, which a fuse frozen or starved since before the grant never does: it says so
//! on the `armed` pipe ([`Arming`]), and leasehold starts the command only after hearing it.
//!
//! It does nothing else: it reads deadlines, arms the timer, and when leasehold closes the
//! deadlines pipe (nothing of the command is left) it disarms it, waits for the keeper and
//! exits.

use std::io::Read as _;
use std::os::fd::{AsRawFd as _, OwnedFd};

use super::namespace::{self, Refusal, Step};
use super::pipe;
use super::process::{self, Spec};
use super::wire::Nanos;

/// A deadline as it travels to the fuse: nanoseconds on `CLOCK_MONOTONIC`.
pub(crate) const DEADLINE_FRAME: usize = 8;

/// What the fuse says, once, after it read the first deadline: one byte on the `armed`
/// pipe, which it then closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arming {
    /// The kernel's timer is set to the first deadline.
    Armed,
    /// The kernel refused a timer: the keeper and leasehold enforce the deadline alone.
    NoTimer,
}

impl Arming {
    pub(crate) fn encode(self) -> u8 {
        match self {
            Arming::Armed => 1,
            Arming::NoTimer => 0,
        }
    }

    pub(crate) fn decode(byte: u8) -> Option<Arming> {
        match byte {
            1 => Some(Arming::Armed),
            0 => Some(Arming::NoTimer),
            _ => None,
        }
    }
}

/// Where the fuse reports whether the namespace is ready.
pub(crate) struct Setup {
    pub(crate) spec: Spec,
    pub(crate) user: bool,
    /// leasehold's pid: the fuse exits at once if it is no longer its parent.
    pub(crate) parent: libc::pid_t,
    pub(crate) orders: OwnedFd,
    pub(crate) events: OwnedFd,
    pub(crate) deadlines: OwnedFd,
    /// Where the fuse says it armed its timer ([`Arming`]).
    pub(crate) armed: OwnedFd,
    pub(crate) ready: OwnedFd,
}

fn say_ready(ready: &OwnedFd, word: [u8; 5]) {
    // SAFETY: one write of 5 bytes (< PIPE_BUF: atomic) from a local buffer.
    unsafe {
        libc::write(ready.as_raw_fd(), word.as_ptr().cast(), word.len());
    }
}

/// Dies with the process that forked this one; exits at once if it is already gone.
/// `parent`: its pid, or `None` where it cannot be seen (outside this PID namespace), in
/// which case `lifeline` — a pipe only the parent holds open for writing — says.
fn die_with_parent(parent: Option<libc::pid_t>, lifeline: Option<&OwnedFd>) {
    // SAFETY: prctl with integer arguments; getppid and poll read state into locals.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            libc::_exit(1);
        }
        if let Some(parent) = parent
            && libc::getppid() != parent
        {
            libc::_exit(1);
        }
        if let Some(lifeline) = lifeline {
            let mut fd = libc::pollfd {
                fd: lifeline.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&raw mut fd, 1, 0) > 0 && fd.revents & libc::POLLHUP != 0 {
                libc::_exit(1);
            }
        }
    }
}

/// The fuse's life, in the process leasehold forked: never returns.
pub(crate) fn run(setup: Setup) -> ! {
    let Setup {
        spec,
        user,
        parent,
        orders,
        events,
        deadlines,
        armed,
        ready,
    } = setup;
    process::detach();
    // `ps -o comm`, `top` and `pkill -x` tell it apart (its argv stays leasehold's).
    // SAFETY: prctl with a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"leasehold-fuse".as_ptr());
    }
    if let Err(refusal) = namespace::enter(user) {
        say_ready(&ready, refusal.encode());
        std::process::exit(1);
    }
    // Armed after the namespaces are entered: a change of credentials would clear it.
    die_with_parent(Some(parent), None);
    let Ok((lifeline_read, lifeline_write)) = pipe::pipe(false) else {
        say_ready(
            &ready,
            Refusal {
                step: Step::Fork,
                errno: libc::EMFILE,
            }
            .encode(),
        );
        std::process::exit(1);
    };
    // SAFETY: single-threaded (forked from leasehold before its runtime started).
    match unsafe { libc::fork() } {
        -1 => {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            say_ready(
                &ready,
                Refusal {
                    step: Step::Fork,
                    errno,
                }
                .encode(),
            );
            std::process::exit(1)
        }
        0 => {
            // The keeper: PID 1 of the new namespace.
            drop((lifeline_write, deadlines, armed));
            die_with_parent(None, Some(&lifeline_read));
            drop(lifeline_read);
            if let Err(refusal) = namespace::mount_proc() {
                say_ready(&ready, refusal.encode());
                std::process::exit(1);
            }
            say_ready(&ready, Refusal::READY);
            drop(ready);
            process::detach();
            process::run(spec, orders, events)
        }
        keeper => {
            // Only the keeper may hold these: its death must end the events pipe and the
            // ready pipe for leasehold.
            drop((orders, events, ready, lifeline_read));
            burn(keeper, deadlines, armed, lifeline_write)
        }
    }
}

/// Arms the timer at every deadline leasehold sends, saying so after the first; once
/// leasehold closes the pipe, disarms it, waits for the keeper and exits.
fn burn(keeper: libc::pid_t, deadlines: OwnedFd, armed: OwnedFd, _lifeline: OwnedFd) -> ! {
    let timer = Timer::new();
    let mut deadlines = std::fs::File::from(deadlines);
    let mut frame = [0u8; DEADLINE_FRAME];
    let mut armed = Some(armed);
    while deadlines.read_exact(&mut frame).is_ok() {
        if let Some(timer) = &timer {
            timer.arm_at(u64::from_le_bytes(frame));
        }
        // Said after the timer is set, never before: leasehold starts the command on it.
        if let Some(armed) = armed.take() {
            let said = if timer.is_some() {
                Arming::Armed
            } else {
                Arming::NoTimer
            };
            // SAFETY: one write of one byte from a local.
            unsafe {
                libc::write(armed.as_raw_fd(), [said.encode()].as_ptr().cast(), 1);
            }
        }
    }
    if let Some(timer) = &timer {
        timer.disarm();
    }
    let mut status = 0;
    // SAFETY: waitpid on our own child, writing a local.
    unsafe {
        libc::waitpid(keeper, &raw mut status, 0);
    }
    std::process::exit(0)
}

/// A POSIX timer on `CLOCK_MONOTONIC` that sends SIGKILL to this process.
struct Timer(libc::timer_t);

impl Timer {
    /// `None` if the kernel refuses one (then the keeper and leasehold still enforce the
    /// deadline; only a freeze of all three goes unanswered).
    fn new() -> Option<Timer> {
        // SAFETY: a zeroed sigevent is valid; the fields set are the ones SIGEV_SIGNAL reads.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_SIGNAL;
        event.sigev_signo = libc::SIGKILL;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: timer_create writes one timer id through the pointer.
        let made =
            unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &raw mut event, &raw mut timer) };
        (made == 0).then_some(Timer(timer))
    }

    fn set(&self, at: Nanos) {
        let value = libc::timespec {
            tv_sec: libc::time_t::try_from(at / 1_000_000_000).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::try_from(at % 1_000_000_000).unwrap_or(0),
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: timer_settime on our own timer with a local itimerspec.
        unsafe {
            libc::timer_settime(
                self.0,
                libc::TIMER_ABSTIME,
                &raw const spec,
                std::ptr::null_mut(),
            );
        }
    }

    /// SIGKILL at `at` (absolute, `CLOCK_MONOTONIC`); an instant already past fires at once.
    fn arm_at(&self, at: Nanos) {
        // Zero would disarm it: the earliest instant there is fires at once instead.
        self.set(at.max(1));
    }

    fn disarm(&self) {
        self.set(0);
    }
}
