//! The kernel's hold on the command's process tree: a PID namespace of its own, whose init
//! is the keeper.
//!
//! When a PID namespace's init ends, the kernel SIGKILLs every other process in it and
//! reaps them before the init's own exit completes; no process can leave a PID namespace
//! (`setsid`, a double fork and a setuid program all stay in it). The keeper is that init,
//! and it carries a parent-death SIGKILL tied to the fuse ([`super::fuse`]), which carries
//! one tied to leasehold. So whichever of leasehold's processes dies, in whatever order or
//! all at once, the kernel ends the whole tree — no process of leasehold's has to be alive,
//! or running, to do it.
//!
//! Creating a PID namespace needs `CAP_SYS_ADMIN`: leasehold running as root has it; any
//! other user gets it inside a user namespace of its own (where the host allows them), which
//! maps the user's own uid and gid to themselves and nothing else. The namespace gets a
//! mount namespace with a `/proc` of its own, so what the command sees is consistent:
//! `$$`, `ps`, `/proc/<pid>` and `kill` all speak the namespace's pids.

use std::io;

/// `--pid-namespace`: whether the command's tree runs in a PID namespace of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PidNamespace {
    /// Where the host allows it; the keeper alone (a child subreaper) where it does not.
    Auto,
    /// Always: refuse to run the command where the host does not allow it.
    Require,
    /// Never: the keeper alone holds the tree (the command sees the host's pids).
    Off,
}

/// The variable `--pid-namespace` overrides.
const PID_NAMESPACE_VAR: &str = crate::variables::PID_NAMESPACE;

impl PidNamespace {
    /// `$LEASEHOLD_PID_NAMESPACE`, else auto.
    ///
    /// # Errors
    /// The variable's value, when it is not one of the option's.
    pub(crate) fn from_env() -> Result<PidNamespace, String> {
        let Some(value) = std::env::var_os(PID_NAMESPACE_VAR) else {
            return Ok(PidNamespace::Auto);
        };
        value
            .to_str()
            .and_then(|text| clap::ValueEnum::from_str(text, false).ok())
            .ok_or_else(|| format!("{PID_NAMESPACE_VAR}={value:?}: not one of auto, require, off"))
    }
}

/// `--allow-new-privileges`: whether the command's processes may gain privileges by
/// executing a setuid or file-capability program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NewPrivileges {
    /// `PR_SET_NO_NEW_PRIVS` on the command (the default): no descendant can become a user
    /// leasehold cannot signal.
    Refused,
    /// The command may run `sudo` and the like (and so, outside a namespace, start a
    /// process leasehold cannot kill).
    Allowed,
}

/// What holds the command's process tree in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Containment {
    /// A PID namespace whose init is the keeper; `user`: inside a user namespace of its
    /// own (leasehold does not run as root).
    Namespace { user: bool },
    /// The keeper alone: a child subreaper that finds descendants through `/proc`.
    Subreaper,
}

impl Containment {
    /// Words for the debug log and `doctor`.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Containment::Namespace { user: false } => {
                "a PID namespace of its own: when any of leasehold's processes dies, the \
                 kernel kills every process of the command"
            }
            Containment::Namespace { user: true } => {
                "a PID namespace of its own, in a user namespace mapping only this user: when \
                 any of leasehold's processes dies, the kernel kills every process of the \
                 command; setuid programs do not gain privileges there"
            }
            Containment::Subreaper => {
                "the keeper alone (no PID namespace): it kills the command's processes when \
                 leasehold dies, but if leasehold and the keeper are both killed at once, \
                 processes the command started outside its process group run on"
            }
        }
    }
}

/// The step at which a namespace could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// `unshare(2)` of the PID, mount (and user) namespaces.
    Unshare,
    /// Writing the user namespace's uid or gid map.
    IdMap,
    /// Making the mount namespace's mounts its own (`MS_SLAVE`).
    Propagation,
    /// Mounting the namespace's `/proc`.
    Proc,
    /// Forking the namespace's init.
    Fork,
    /// The process that was setting it up ended without saying.
    Vanished,
    /// `--allow-new-privileges` without root: a user namespace would void setuid programs.
    NeedsRoot,
}

/// Why the command's tree cannot run in a PID namespace here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub(crate) struct Refusal {
    pub(crate) step: Step,
    pub(crate) errno: i32,
}

impl Refusal {
    fn describe(&self) -> String {
        let err = io::Error::from_raw_os_error(self.errno);
        match self.step {
            Step::Unshare => {
                format!("this host does not let leasehold create a PID namespace ({err})")
            }
            Step::IdMap => format!("the user namespace's id map cannot be written ({err})"),
            Step::Propagation => format!("the mount namespace cannot be made private ({err})"),
            Step::Proc => format!("the namespace's /proc cannot be mounted ({err})"),
            Step::Fork => format!("the namespace's first process cannot be started ({err})"),
            Step::Vanished => {
                "the process setting up the namespace ended without a word".to_owned()
            }
            Step::NeedsRoot => {
                "with --allow-new-privileges only root gets a PID namespace (a user \
                                namespace would keep setuid programs from gaining privileges)"
                    .to_owned()
            }
        }
    }

    /// As 5 bytes for the pipe it travels through: the step and the errno.
    pub(crate) fn encode(self) -> [u8; 5] {
        let mut out = [0u8; 5];
        out[0] = match self.step {
            Step::Unshare => 1,
            Step::IdMap => 2,
            Step::Propagation => 3,
            Step::Proc => 4,
            Step::Fork => 5,
            Step::Vanished => 6,
            Step::NeedsRoot => 7,
        };
        out[1..].copy_from_slice(&self.errno.to_le_bytes());
        out
    }

    /// `None` for step 0, which says the namespace is ready.
    pub(crate) fn decode(bytes: [u8; 5]) -> Option<Refusal> {
        let step = match bytes[0] {
            1 => Step::Unshare,
            2 => Step::IdMap,
            3 => Step::Propagation,
            4 => Step::Proc,
            5 => Step::Fork,
            0 => return None,
            7 => Step::NeedsRoot,
            _ => Step::Vanished,
        };
        let errno = i32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        Some(Refusal { step, errno })
    }

    /// The pipe's word for "the namespace is ready".
    pub(crate) const READY: [u8; 5] = [0; 5];
}

/// Whether a namespace is tried for this run, and with a user namespace: `None` to run
/// under the keeper alone.
pub(crate) fn plan(
    wanted: PidNamespace,
    privileges: NewPrivileges,
) -> Result<Option<bool>, Refusal> {
    if wanted == PidNamespace::Off {
        return Ok(None);
    }
    // SAFETY: geteuid reads this process's credentials.
    let root = unsafe { libc::geteuid() } == 0;
    match (root, privileges, wanted) {
        (true, _, _) => Ok(Some(false)),
        (false, NewPrivileges::Refused, _) => Ok(Some(true)),
        (false, NewPrivileges::Allowed, PidNamespace::Require) => Err(Refusal {
            step: Step::NeedsRoot,
            errno: 0,
        }),
        (false, NewPrivileges::Allowed, _) => Ok(None),
    }
}

fn check(result: libc::c_int, step: Step) -> Result<(), Refusal> {
    if result == 0 {
        Ok(())
    } else {
        Err(Refusal {
            step,
            errno: io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        })
    }
}

/// Puts this process's future children in a new PID namespace (the first one forked is
/// its init), and this process in a new mount namespace — and, with `user`, in a new user
/// namespace mapping this process's uid and gid to themselves. Call it single-threaded.
pub(crate) fn enter(user: bool) -> Result<(), Refusal> {
    // SAFETY: geteuid/getegid read this process's credentials.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS;
    if user {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: unshare with flags only; the process is single-threaded (the caller's promise).
    check(unsafe { libc::unshare(flags) }, Step::Unshare)?;
    if user {
        // The one mapping an unprivileged user may write: its own ids (setgroups denied
        // first, as the kernel requires before a gid map).
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|e| Refusal {
                step: Step::IdMap,
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })
        };
        write("/proc/self/setgroups", "deny".to_owned())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    // The namespace's /proc must not show up on the host: mounts made in it stay in it,
    // while the host's still reach it.
    // SAFETY: mount(2) with NUL-terminated strings and null data.
    check(
        unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            )
        },
        Step::Propagation,
    )
}

/// In the namespace's init: a `/proc` showing the namespace's processes, under their
/// namespace pids — which the keeper's own walks of the tree rely on.
pub(crate) fn mount_proc() -> Result<(), Refusal> {
    // SAFETY: mount(2) with NUL-terminated strings and null data.
    check(
        unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        },
        Step::Proc,
    )
}

/// Whether this host gives `leasehold run --pid-namespace auto` a namespace, tried in a
/// throwaway process exactly as a run sets one up; `Ok(None)`: a run would not try one.
/// Call it single-threaded.
pub(crate) fn probe() -> Result<Option<Containment>, Refusal> {
    let Some(user) = plan(PidNamespace::Auto, NewPrivileges::Refused)? else {
        return Ok(None);
    };
    let io_refusal = |e: io::Error| Refusal {
        step: Step::Fork,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    };
    let (read, write) = super::pipe::pipe(false).map_err(io_refusal)?;
    // SAFETY: single-threaded (the caller's promise); the child only calls `enter`, fork,
    // mount, write and _exit.
    match unsafe { libc::fork() } {
        -1 => Err(io_refusal(io::Error::last_os_error())),
        0 => {
            drop(read);
            let word = match enter(user) {
                Err(refusal) => refusal.encode(),
                // SAFETY: as above; the grandchild is the namespace's init.
                Ok(()) => match unsafe { libc::fork() } {
                    0 => mount_proc().err().map_or(Refusal::READY, Refusal::encode),
                    -1 => Refusal {
                        step: Step::Fork,
                        errno: io::Error::last_os_error()
                            .raw_os_error()
                            .unwrap_or(libc::EIO),
                    }
                    .encode(),
                    init => {
                        let mut status = 0;
                        // SAFETY: waitpid on our own child, then _exit without saying more.
                        unsafe {
                            libc::waitpid(init, &raw mut status, 0);
                            libc::_exit(0)
                        }
                    }
                },
            };
            // SAFETY: one write of 5 bytes from a local, then _exit.
            unsafe {
                libc::write(
                    std::os::fd::AsRawFd::as_raw_fd(&write),
                    word.as_ptr().cast(),
                    word.len(),
                );
                libc::_exit(0)
            }
        }
        child => {
            drop(write);
            let mut word = [0u8; 5];
            let said = io::Read::read_exact(&mut std::fs::File::from(read), &mut word);
            let mut status = 0;
            // SAFETY: waitpid on our own child, writing a local.
            unsafe {
                libc::waitpid(child, &raw mut status, 0);
            }
            match (said, Refusal::decode(word)) {
                (Ok(()), None) => Ok(Some(Containment::Namespace { user })),
                (Ok(()), Some(refusal)) => Err(refusal),
                (Err(_), _) => Err(Refusal {
                    step: Step::Vanished,
                    errno: 0,
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_never_tries_and_root_never_needs_a_user_namespace() {
        assert_eq!(plan(PidNamespace::Off, NewPrivileges::Refused), Ok(None));
        assert_eq!(plan(PidNamespace::Off, NewPrivileges::Allowed), Ok(None));
        // SAFETY: geteuid reads this process's credentials.
        let root = unsafe { libc::geteuid() } == 0;
        for wanted in [PidNamespace::Auto, PidNamespace::Require] {
            assert_eq!(
                plan(wanted, NewPrivileges::Refused),
                Ok(Some(!root)),
                "{wanted:?}"
            );
        }
    }

    #[test]
    fn every_refusal_survives_its_bytes() {
        for step in [
            Step::Unshare,
            Step::IdMap,
            Step::Propagation,
            Step::Proc,
            Step::Fork,
            Step::Vanished,
            Step::NeedsRoot,
        ] {
            let refusal = Refusal {
                step,
                errno: libc::EPERM,
            };
            assert_eq!(Refusal::decode(refusal.encode()), Some(refusal));
        }
        assert_eq!(Refusal::decode(Refusal::READY), None);
    }
}
