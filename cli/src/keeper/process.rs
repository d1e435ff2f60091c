//! The keeper process's I/O: it waits on leasehold's orders, its children's exits and its
//! timers, feeds each to the [`Keeper`] machine and carries out the actions.
//!
//! It is single-threaded and runs no async runtime, so what it does between `fork` and
//! `exec` of the command (parent-death signal, signal dispositions) is plainly safe, and
//! the parent-death signal it sets is tied to a thread that lives as long as the keeper.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;

use super::machine::{Action, Input, Keeper, Policy};
use super::namespace::{NewPrivileges, PidNamespace};
use super::wire::{Event, FRAME, Order, Signal};
use super::{mono_now, set_child_subreaper};
use super::{pipe, tree};

/// What the keeper runs, and how.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) policy: Policy,
    pub(crate) pid_namespace: PidNamespace,
    pub(crate) new_privileges: NewPrivileges,
}

/// The write end of the pipe the SIGCHLD handler wakes the loop through.
static WAKE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = WAKE_FD.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; a full pipe (EAGAIN) already wakes the loop.
        unsafe {
            libc::write(fd, [0u8].as_ptr().cast(), 1);
        }
    }
}

/// Signals the keeper ignores and the command gets back at their default. The keeper must
/// outlive the command to reap it, and must never be stopped (^Z) while the command runs
/// on: it is what kills the tree at the lease's deadline. A terminal's ^C, ^\\ and ^Z
/// reach it only if it could not leave leasehold's process group ([`detach`]). SIGPIPE: a
/// dead leasehold's pipe.
const IGNORED: [i32; 4] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGPIPE];

/// Ignores the forwarded signals and [`IGNORED`], and wakes the loop on SIGCHLD.
fn install_signal_dispositions(wake: &OwnedFd) {
    WAKE_FD.store(wake.as_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    // SAFETY: signal(2) with SIG_IGN or a handler that only calls write(2).
    unsafe {
        for signal in Signal::FORWARDED
            .map(Signal::raw)
            .into_iter()
            .chain(IGNORED)
        {
            libc::signal(signal, libc::SIG_IGN);
        }
        libc::signal(libc::SIGCHLD, on_sigchld as *const () as libc::sighandler_t);
    }
}

/// Leaves leasehold's session, or failing that its process group, so that a signal sent to
/// leasehold's whole group (`kill -KILL -PGID`, `timeout -s KILL`, SIGSTOP of a job) does not
/// reach the keeper. A freshly forked child is never a group leader, so `setsid` does not
/// fail for that reason; `setpgid` is the fallback should a platform refuse it anyway.
pub(crate) fn detach() {
    // SAFETY: setsid and setpgid act on this process only.
    unsafe {
        if libc::setsid() == -1 {
            libc::setpgid(0, 0);
        }
    }
}

/// The keeper's life: never returns.
pub(crate) fn run(spec: Spec, orders: OwnedFd, events: OwnedFd) -> ! {
    let code = match Process::new(spec, orders, events) {
        Ok(mut process) => process.run(),
        Err(_) => 1,
    };
    std::process::exit(code)
}

struct Process {
    spec: Spec,
    keeper: Keeper,
    me: u32,
    orders: OwnedFd,
    events: OwnedFd,
    wake: (OwnedFd, OwnedFd),
    /// Bytes of an order not yet complete.
    partial: Vec<u8>,
    leasehold_gone: bool,
    /// The command's pid (also its process group), once started.
    main: Option<u32>,
    main_reaped: bool,
    /// The counted lease's slot, for the command's `LEASEHOLD_SLOT`.
    slot: Option<u16>,
    /// The processes already reported [`Event::Unkillable`].
    unkillable: std::collections::HashSet<u32>,
}

impl Process {
    fn new(spec: Spec, orders: OwnedFd, events: OwnedFd) -> io::Result<Process> {
        let wake = pipe::pipe(true)?;
        install_signal_dispositions(&wake.1);
        set_child_subreaper();
        // `ps -o comm` and `top` show what it is (its argv stays leasehold's).
        #[cfg(target_os = "linux")]
        // SAFETY: prctl with a NUL-terminated string of at most 16 bytes.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, c"leasehold-keep".as_ptr());
        }
        Ok(Process {
            keeper: Keeper::new(spec.policy),
            spec,
            me: std::process::id(),
            orders,
            events,
            wake,
            partial: Vec::new(),
            leasehold_gone: false,
            slot: None,
            unkillable: std::collections::HashSet::new(),
            main: None,
            main_reaped: false,
        })
    }

    fn run(&mut self) -> i32 {
        loop {
            let orders_ready = self.wait_for_something();
            let now = mono_now();
            let mut inputs = VecDeque::new();
            if orders_ready {
                self.read_orders(&mut inputs);
            }
            self.reap(&mut inputs);
            inputs.push_back(Input::Tick);
            while let Some(input) = inputs.pop_front() {
                for action in self.keeper.handle_input(input, now) {
                    if let Some(code) = self.act(action, &mut inputs) {
                        return code;
                    }
                }
            }
        }
    }

    /// Blocks until an order, a child's exit, or the machine's next wake-up; says whether
    /// the orders pipe has something to read (data or its end).
    fn wait_for_something(&self) -> bool {
        let timeout = self.keeper.poll_timeout().map_or(-1, |at| {
            let ns = at.saturating_sub(mono_now());
            // Round up: waking early would only loop once more.
            i32::try_from(ns.div_ceil(1_000_000)).unwrap_or(i32::MAX)
        });
        let mut fds = [
            libc::pollfd {
                fd: if self.leasehold_gone {
                    -1
                } else {
                    self.orders.as_raw_fd()
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) } > 0;
        let mut sink = [0u8; 64];
        // SAFETY: reads into a local buffer from our own non-blocking pipe.
        while unsafe { libc::read(self.wake.0.as_raw_fd(), sink.as_mut_ptr().cast(), 64) } > 0 {}
        ready && fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }

    fn read_orders(&mut self, inputs: &mut VecDeque<Input>) {
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a local buffer; poll said the pipe has data or is at its end.
        let n = unsafe { libc::read(self.orders.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(0) | Err(_) => {
                self.leasehold_gone = true;
                inputs.push_back(Input::LeaseholdGone);
            }
            Ok(n) => {
                self.partial.extend_from_slice(&buf[..n]);
                let whole = self.partial.len() / FRAME * FRAME;
                for chunk in self.partial[..whole].chunks_exact(FRAME) {
                    let mut frame = [0u8; FRAME];
                    frame.copy_from_slice(chunk);
                    if let Some(order) = Order::decode(&frame) {
                        inputs.push_back(match order {
                            // How to start the command, not a step of its life: kept
                            // here, out of the machine.
                            Order::Slot(slot) => {
                                self.slot = Some(slot);
                                continue;
                            }
                            Order::Start { token, deadline } => Input::Start { token, deadline },
                            Order::Deadline(at) => Input::Deadline(at),
                            Order::Forward(signal) => Input::Forward(signal),
                            Order::Stop { within } => Input::Stop { within },
                        });
                    }
                }
                self.partial.drain(..whole);
            }
        }
    }

    /// Reaps every child that exited (the command, and the orphans re-parented to the
    /// keeper), then says whether the command exited and whether anything is left.
    fn reap(&mut self, inputs: &mut VecDeque<Input>) {
        let mut main_status = None;
        let empty = loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local.
            let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) };
            match pid {
                0 => break false,
                p if p > 0 => {
                    if self.main == u32::try_from(p).ok() {
                        main_status = Some(status);
                    }
                }
                _ => break io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD),
            }
        };
        if let Some(status) = main_status {
            self.main_reaped = true;
            let left_behind = if empty {
                0
            } else {
                u32::try_from(tree::descendants(self.me).len()).unwrap_or(u32::MAX)
            };
            inputs.push_back(Input::MainExited {
                status,
                left_behind,
            });
        }
        if empty && self.main_reaped {
            inputs.push_back(Input::TreeEmpty);
        }
    }

    /// Carries out `action`; `Some(code)` when the keeper must exit.
    fn act(&mut self, action: Action, inputs: &mut VecDeque<Input>) -> Option<i32> {
        match action {
            Action::Spawn { token } => inputs.push_back(match self.spawn(token) {
                Ok(pid) => {
                    self.main = Some(pid);
                    Input::Spawned { pid }
                }
                Err(e) => Input::SpawnFailed {
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                },
            }),
            Action::SignalGroup(signal) => {
                if let Some(group) = self.main.and_then(|p| i32::try_from(p).ok()) {
                    // SAFETY: kill(2) on the command's process group.
                    unsafe {
                        libc::kill(-group, signal.raw());
                    }
                }
            }
            Action::SignalTree(signal) => {
                let refused = tree::signal_all(self.me, self.main, None, signal).refused;
                for pid in refused {
                    if self.unkillable.insert(pid) {
                        self.report(Event::Unkillable { pid });
                    }
                }
            }
            Action::Report(event) => self.report(event),
            Action::Exit => return Some(0),
        }
        None
    }

    fn report(&self, event: Event) {
        let frame = event.encode();
        // Written even after the orders pipe closed: leasehold closes it to have the tree
        // killed, then waits for `Gone` before it releases the lease.
        // SAFETY: one write of FRAME < PIPE_BUF bytes from a local buffer: atomic. A dead
        // leasehold (EPIPE, SIGPIPE ignored) needs no report.
        unsafe {
            libc::write(self.events.as_raw_fd(), frame.as_ptr().cast(), FRAME);
        }
    }

    fn spawn(&self, token: u64) -> io::Result<u32> {
        let keeper = libc::pid_t::try_from(self.me).unwrap_or(0);
        let no_new_privileges = self.spec.new_privileges == NewPrivileges::Refused;
        let mut command = std::process::Command::new(&self.spec.program);
        command
            .args(&self.spec.args)
            .env(crate::variables::FENCING_TOKEN, token.to_string())
            // Its own process group: forwarded signals reach what it starts, and a
            // terminal's ^C reaches leasehold, which forwards it, not the command directly.
            .process_group(0);
        if let Some(slot) = self.slot {
            command.env(crate::variables::SLOT, slot.to_string());
        }
        // SAFETY: the keeper is single-threaded, so the child may call anything between
        // fork and exec; it calls only prctl, getppid and signal-mask functions.
        unsafe {
            command.pre_exec(move || {
                // No descendant may become a user leasehold cannot signal (a setuid
                // program): inherited by every process the command starts, for good.
                #[cfg(target_os = "linux")]
                if no_new_privileges && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                let _ = no_new_privileges;
                // The command dies with the keeper, which dies only after it or when killed.
                #[cfg(target_os = "linux")]
                {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // The keeper may have died before the signal was armed.
                    if libc::getppid() != keeper {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                }
                let _ = keeper;
                // The keeper ignores these; the command starts with the defaults.
                for signal in Signal::FORWARDED
                    .map(Signal::raw)
                    .into_iter()
                    .chain(IGNORED)
                {
                    libc::signal(signal, libc::SIG_DFL);
                }
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&raw mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &raw const none, std::ptr::null_mut());
                Ok(())
            });
        }
        let child = command.spawn()?;
        // Reaped by `reap` through waitpid(-1), never through `child`.
        Ok(child.id())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::time::Duration;

    use super::super::machine::{Leftovers, Policy};
    use super::super::{TEST_SERIAL, mono_now, nanos};
    use super::*;

    /// Every event the keeper wrote, in order.
    fn events_of(events: OwnedFd) -> Vec<Event> {
        let mut bytes = Vec::new();
        std::fs::File::from(events)
            .read_to_end(&mut bytes)
            .expect("read events");
        bytes
            .chunks_exact(FRAME)
            .filter_map(|chunk| Event::decode(chunk.try_into().ok()?))
            .collect()
    }

    /// The keeper loop in this (test) process: it becomes a subreaper and ignores the
    /// forwarded signals here, which the other tests of this binary do not mind.
    #[test]
    fn orders_that_end_while_the_command_runs_still_get_every_event_up_to_gone() {
        let _serial = TEST_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let (orders_read, orders_write) = pipe::pipe(false).expect("pipe");
        let (events_read, events_write) = pipe::pipe(false).expect("pipe");
        let spec = Spec {
            program: "sh".into(),
            args: vec!["-c".into(), "sleep 30 & sleep 30".into()],
            policy: Policy {
                grace: None,
                kill_after: None,
                leftovers: Leftovers::Stop,
            },
            pid_namespace: PidNamespace::Off,
            new_privileges: NewPrivileges::Refused,
        };
        let start = Order::Start {
            token: 1,
            deadline: mono_now() + nanos(Duration::from_secs(60)),
        };
        let mut orders = std::fs::File::from(orders_write);
        orders.write_all(&start.encode()).expect("send Start");
        // leasehold closes its orders to have the tree killed; it still waits for `Gone`.
        drop(orders);
        let mut process = Process::new(spec, orders_read, events_write).expect("keeper");
        assert_eq!(process.run(), 0);
        drop(process);
        let events = events_of(events_read);
        assert!(
            matches!(events.first(), Some(Event::Started { .. })),
            "{events:?}"
        );
        assert!(
            events.contains(&Event::Exited {
                status: libc::SIGKILL
            }),
            "{events:?}"
        );
        assert_eq!(events.last(), Some(&Event::Gone), "{events:?}");
    }
}
