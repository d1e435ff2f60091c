//! `leasehold run`'s options: what the parser reads (each with its help and its
//! variable's rule, docs/cli.md), and the few answers derived from them that more than one
//! phase asks for.

use std::time::Duration;

use clap::Args;
use leasehold::HolderLabel;

use crate::Common;
use crate::config;
use crate::keeper::{Leftovers, PidNamespace, Signal};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Lease time to live, renewed while the command runs (its help, with the minimum under
    /// the settings in force, is set at start: `ttl::help`).
    #[arg(long, value_name = "DURATION", value_parser = config::parse_ttl)]
    pub(crate) ttl: Option<Duration>,
    /// How long to wait for a held lease (0s ..= 1h; 0s: try once), saying who holds it
    /// meanwhile (flock's -w) [default: 0s].
    #[arg(short = 'w', long, value_name = "DURATION", value_parser = config::parse_wait)]
    pub(super) wait: Option<Duration>,
    /// Do not wait for a held lease: try once, as --wait 0s (flock's -n); it overrides
    /// LEASEHOLD_WAIT.
    #[arg(short = 'n', long)]
    pub(super) no_wait: bool,
    /// Renewal cadence [env: LEASEHOLD_RENEW_EVERY] [default: ttl/3]; must be less than
    /// ttl − drift − safety margin.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_renew_every)]
    pub(super) renew_every: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command's processes are stopped (0s ..= 1h)
    /// [default: whatever local validity is left]; never extends past local validity, nor
    /// past one renewal period once Redis says the lease is gone.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_grace)]
    pub(crate) grace: Option<Duration>,
    /// Like timeout(1)'s -k: SIGKILL every process of the command if it has not ended this
    /// long after a forwarded HUP, INT, QUIT, TERM or ALRM, or after --timeout's signal
    /// (0s ..= 1h).
    #[arg(short = 'k', long, value_name = "DURATION", value_parser = config::parse_kill_after)]
    pub(crate) kill_after: Option<Duration>,
    /// Like timeout(1)'s DURATION: this long after the command started, send it --signal
    /// (to every process it left behind, once it exited), SIGKILL after --kill-after if
    /// given; once nothing of it is left the lease is released and leasehold exits 124
    /// (1ms ..= 30d) [default: none].
    #[arg(long, value_name = "DURATION", value_parser = config::parse_timeout)]
    pub(crate) timeout: Option<Duration>,
    /// The signal --timeout sends (timeout(1)'s -s): HUP, INT, QUIT, TERM, USR1, USR2,
    /// ALRM or KILL, by name (SIGTERM, term) or number [default: TERM].
    #[arg(short = 's', long, value_name = "SIGNAL", value_parser = config::parse_signal, requires = "timeout")]
    pub(super) signal: Option<Signal>,
    /// When the command exits but processes it started still run, keep the lease (renewing)
    /// until they end, instead of stopping them.
    #[arg(long)]
    pub(crate) wait_for_descendants: bool,
    /// Run the command in a PID namespace of its own, so that the kernel kills every
    /// process of it whichever of leasehold's processes dies (auto: where the host allows
    /// it — root, or unprivileged user namespaces; require: refuse to run elsewhere; off:
    /// the command sees the host's pids). In it the command's `$$` and `ps` show the
    /// namespace's pids [env: LEASEHOLD_PID_NAMESPACE] [default: auto].
    #[arg(long, value_name = "WHEN", value_enum)]
    pub(super) pid_namespace: Option<PidNamespace>,
    /// Let the command's processes gain privileges (setuid programs such as sudo, file
    /// capabilities). By default they cannot (no_new_privs), so that no process of the
    /// command becomes one leasehold cannot kill; a non-root leasehold then runs the
    /// command without a PID namespace.
    #[arg(long)]
    pub(crate) allow_new_privileges: bool,
    /// After acquiring, wait until N replicas (1 ..= 16) hold the lease (Redis WAIT), so a
    /// failover to one of them keeps it. Short of N by the end of --replica-wait, the lease
    /// is held all the same (WAIT never undoes a write) and the command runs — its writes
    /// are still fenced by LEASEHOLD_FENCING_TOKEN — with one line on stderr saying how
    /// many acknowledged; add --require-replicas to refuse instead.
    #[arg(long, value_name = "N", value_parser = config::parse_replicas, allow_negative_numbers = true)]
    pub(super) replicas: Option<u32>,
    /// Longest wait for --replicas (1ms ..= 10s) [default: 1s]. It comes out of the lease's
    /// validity, so it must be less than ttl − drift budget − safety margin − renew-every.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = config::parse_replica_wait
    )]
    pub(super) replica_wait: Option<Duration>,
    /// Do not run the command unless --replicas replicas acknowledged the lease: release it
    /// and exit 125. A failover to one of those replicas then keeps the lease; one to a
    /// replica that did not acknowledge, or one that loses a later renewal, can still let
    /// another run start while this one runs (renewals are not waited for).
    #[arg(long)]
    pub(super) require_replicas: bool,
    /// Admit up to N holders at once (1 ..= 64): a counted lease, of which each run holds
    /// one slot with a fencing token of its own. Every holder must give the same N (it is
    /// part of the lease's name) [default: 1].
    #[arg(long, value_name = "N", value_parser = config::parse_permits, allow_negative_numbers = true)]
    pub(super) permits: Option<u16>,
    /// After this run's lease ends without a release (leasehold killed, partitioned or
    /// paused past its TTL), refuse every acquisition of the resource for this long more
    /// (1ms ..= 1h), so the command has time to notice and stop before another starts. A
    /// run that ends normally releases and skips it. Contenders are told it is a
    /// lock-delay, and with --wait wait it out [default: none].
    #[arg(long, value_name = "DURATION", value_parser = config::parse_lock_delay)]
    pub(super) lock_delay: Option<Duration>,
    /// Who holds the lease, as `leasehold inspect` shows it [default: <hostname>:<pid>];
    /// public (never a secret), printable ASCII, no spaces, ≤ 64 bytes.
    #[arg(long, value_name = "LABEL", value_parser = config::parse_holder)]
    pub(super) holder: Option<HolderLabel>,
    /// Operation id of this run [default: run-<pid>]; printable ASCII, no spaces, ≤ 128 bytes.
    #[arg(long, value_name = "ID")]
    pub(super) operation_id: Option<String>,
    /// Exit status when the lease is held by someone else (flock's -E) [default: 75].
    #[arg(short = 'E', long, value_name = "N", value_parser = clap::value_parser!(u8))]
    pub(super) conflict_exit_code: Option<u8>,
    /// Say nothing on stderr when the lease is held by someone else, nor while waiting for
    /// it: for a fleet's cron jobs, whose losing hosts would otherwise mail the operator
    /// every night.
    #[arg(long)]
    pub(super) quiet: bool,
    /// Serve Prometheus metrics (text format) on this address while the command runs,
    /// e.g. 127.0.0.1:9464 or localhost:9464.
    #[arg(long, value_name = "HOST:PORT", value_parser = config::parse_socket_addr)]
    pub(super) metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<std::ffi::OsString>,
}

impl RunArgs {
    /// `--wait` (or `LEASEHOLD_WAIT`), or none with `--no-wait`.
    pub(super) fn wait(&self) -> Duration {
        if self.no_wait {
            return Duration::ZERO;
        }
        self.wait.unwrap_or(Duration::ZERO)
    }

    /// `--pid-namespace`, else `$LEASEHOLD_PID_NAMESPACE`, else auto.
    ///
    /// # Errors
    /// The variable's value, when it is not one of the option's.
    pub(crate) fn pid_namespace(&self) -> Result<PidNamespace, String> {
        self.pid_namespace.map_or_else(PidNamespace::from_env, Ok)
    }

    pub(crate) fn new_privileges(&self) -> crate::keeper::NewPrivileges {
        if self.allow_new_privileges {
            crate::keeper::NewPrivileges::Allowed
        } else {
            crate::keeper::NewPrivileges::Refused
        }
    }

    pub(crate) fn leftovers(&self) -> Leftovers {
        if self.wait_for_descendants {
            Leftovers::Wait
        } else {
            Leftovers::Stop
        }
    }
}
