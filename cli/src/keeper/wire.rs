//! What leasehold and the keeper tell each other over their two pipes: fixed 17-byte
//! frames (a tag and two little-endian `u64`), each written with one `write(2)` of less
//! than `PIPE_BUF` bytes, so a frame is never torn or interleaved.

/// Nanoseconds on `CLOCK_MONOTONIC`, which leasehold and the keeper share: what the
/// frames carry for every instant and span.
pub(crate) type Nanos = u64;

/// The length of every frame.
pub(crate) const FRAME: usize = 17;

/// The signals leasehold passes on to the command, and SIGKILL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Hup,
    Int,
    Quit,
    Term,
    Usr1,
    Usr2,
    Alrm,
    Kill,
}

impl Signal {
    /// The signals leasehold forwards to the command, as `timeout(1)` does.
    pub(crate) const FORWARDED: [Signal; 7] = [
        Signal::Hup,
        Signal::Int,
        Signal::Quit,
        Signal::Term,
        Signal::Usr1,
        Signal::Usr2,
        Signal::Alrm,
    ];

    pub(crate) fn raw(self) -> i32 {
        match self {
            Signal::Hup => libc::SIGHUP,
            Signal::Int => libc::SIGINT,
            Signal::Quit => libc::SIGQUIT,
            Signal::Term => libc::SIGTERM,
            Signal::Usr1 => libc::SIGUSR1,
            Signal::Usr2 => libc::SIGUSR2,
            Signal::Alrm => libc::SIGALRM,
            Signal::Kill => libc::SIGKILL,
        }
    }

    pub(crate) fn from_raw(raw: i32) -> Option<Signal> {
        [Signal::Kill]
            .into_iter()
            .chain(Signal::FORWARDED)
            .find(|s| s.raw() == raw)
    }

    /// Whether it asks the command to end, so `--kill-after` follows it. USR1 and USR2
    /// conventionally ask for something else (reopen logs, reload).
    pub(crate) fn is_terminating(self) -> bool {
        !matches!(self, Signal::Usr1 | Signal::Usr2)
    }

    /// `SIGTERM`, …
    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::Hup => "SIGHUP",
            Signal::Int => "SIGINT",
            Signal::Quit => "SIGQUIT",
            Signal::Term => "SIGTERM",
            Signal::Usr1 => "SIGUSR1",
            Signal::Usr2 => "SIGUSR2",
            Signal::Alrm => "SIGALRM",
            Signal::Kill => "SIGKILL",
        }
    }
}

/// leasehold → keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Sent before `Start` under a counted lease: the slot held, for the command's
    /// `LEASEHOLD_SLOT`.
    Slot(u16),
    /// The lease is held: start the command; nothing of it may run past `deadline`.
    Start { token: u64, deadline: Nanos },
    /// A renewal moved the local validity end.
    Deadline(Nanos),
    /// Pass this signal on.
    Forward(Signal),
    /// The lease was lost or became unknown: stop everything, SIGKILL no later than
    /// `within` from its arrival if set (a lease Redis says is gone).
    Stop { within: Option<Nanos> },
}

/// keeper → leasehold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The command runs as `pid` (its process group too).
    Started { pid: u32 },
    /// The command could not be started.
    SpawnFailed { errno: i32 },
    /// The command exited with this raw wait status.
    Exited { status: i32 },
    /// It left this many processes behind.
    LeftBehind { count: u32 },
    /// The deadline came before the tree was gone (leasehold was late): SIGKILL went out.
    DeadlinePassed,
    /// Nothing of the command runs any more; the keeper exits.
    Gone,
    /// The kernel refused the keeper's signal to this process of the command (EPERM: it
    /// runs as a user the keeper may not signal). Said once per process.
    Unkillable { pid: u32 },
}

fn frame(tag: u8, a: u64, b: u64) -> [u8; FRAME] {
    let mut out = [0u8; FRAME];
    out[0] = tag;
    out[1..9].copy_from_slice(&a.to_le_bytes());
    out[9..].copy_from_slice(&b.to_le_bytes());
    out
}

fn parts(bytes: &[u8; FRAME]) -> (u8, u64, u64) {
    let word = |range: std::ops::Range<usize>| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[range]);
        u64::from_le_bytes(w)
    };
    (bytes[0], word(1..9), word(9..FRAME))
}

/// A signal number as a frame word (always a small positive number).
fn signal_word(signal: Signal) -> u64 {
    u64::from(signal.raw().unsigned_abs())
}

fn word_signal(word: u64) -> Option<Signal> {
    i32::try_from(word).ok().and_then(Signal::from_raw)
}

impl Order {
    pub(crate) fn encode(self) -> [u8; FRAME] {
        match self {
            Order::Start { token, deadline } => frame(1, token, deadline),
            Order::Deadline(at) => frame(2, at, 0),
            Order::Forward(signal) => frame(3, signal_word(signal), 0),
            Order::Stop { within: None } => frame(4, 0, 0),
            Order::Stop {
                within: Some(within),
            } => frame(4, 1, within),
            Order::Slot(slot) => frame(5, u64::from(slot), 0),
        }
    }

    /// `None` for a frame no leasehold writes.
    pub(crate) fn decode(bytes: &[u8; FRAME]) -> Option<Order> {
        match parts(bytes) {
            (1, token, deadline) => Some(Order::Start { token, deadline }),
            (2, at, _) => Some(Order::Deadline(at)),
            (3, signal, _) => word_signal(signal).map(Order::Forward),
            (4, 0, _) => Some(Order::Stop { within: None }),
            (4, 1, within) => Some(Order::Stop {
                within: Some(within),
            }),
            (5, slot, _) => u16::try_from(slot).ok().map(Order::Slot),
            _ => None,
        }
    }
}

impl Event {
    pub(crate) fn encode(self) -> [u8; FRAME] {
        // Raw statuses and errnos are non-negative `i32`s; the casts keep their bits.
        let int = |v: i32| u64::from(u32::from_ne_bytes(v.to_ne_bytes()));
        match self {
            Event::Started { pid } => frame(1, u64::from(pid), 0),
            Event::SpawnFailed { errno } => frame(2, int(errno), 0),
            Event::Exited { status } => frame(3, int(status), 0),
            Event::LeftBehind { count } => frame(4, u64::from(count), 0),
            Event::DeadlinePassed => frame(5, 0, 0),
            Event::Gone => frame(6, 0, 0),
            Event::Unkillable { pid } => frame(7, u64::from(pid), 0),
        }
    }

    /// `None` for a frame no keeper writes.
    pub(crate) fn decode(bytes: &[u8; FRAME]) -> Option<Event> {
        let int = |w: u64| {
            u32::try_from(w)
                .ok()
                .map(|u| i32::from_ne_bytes(u.to_ne_bytes()))
        };
        match parts(bytes) {
            (1, pid, _) => u32::try_from(pid).ok().map(|pid| Event::Started { pid }),
            (2, errno, _) => int(errno).map(|errno| Event::SpawnFailed { errno }),
            (3, status, _) => int(status).map(|status| Event::Exited { status }),
            (4, count, _) => u32::try_from(count)
                .ok()
                .map(|count| Event::LeftBehind { count }),
            (5, _, _) => Some(Event::DeadlinePassed),
            (6, _, _) => Some(Event::Gone),
            (7, pid, _) => u32::try_from(pid).ok().map(|pid| Event::Unkillable { pid }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_and_event_survives_its_frame() {
        let orders = [
            Order::Start {
                token: u64::MAX,
                deadline: 7,
            },
            Order::Deadline(123_456_789),
            Order::Stop { within: None },
            Order::Stop { within: Some(0) },
            Order::Stop {
                within: Some(u64::MAX),
            },
            Order::Slot(63),
        ]
        .into_iter()
        .chain(Signal::FORWARDED.map(Order::Forward))
        .chain([Order::Forward(Signal::Kill)]);
        for order in orders {
            assert_eq!(Order::decode(&order.encode()), Some(order));
        }
        let events = [
            Event::Started { pid: 4_194_304 },
            Event::SpawnFailed {
                errno: libc::ENOENT,
            },
            Event::Exited { status: 0x0f00 },
            Event::LeftBehind { count: 3 },
            Event::DeadlinePassed,
            Event::Gone,
            Event::Unkillable { pid: 4_194_304 },
        ];
        for event in events {
            assert_eq!(Event::decode(&event.encode()), Some(event));
        }
    }

    #[test]
    fn unknown_tags_and_signals_decode_to_nothing() {
        assert_eq!(Order::decode(&frame(9, 0, 0)), None);
        assert_eq!(Order::decode(&frame(3, 99, 0)), None);
        assert_eq!(Order::decode(&frame(5, 70_000, 0)), None);
        assert_eq!(Order::decode(&frame(4, 2, 0)), None);
        assert_eq!(Event::decode(&frame(0, 0, 0)), None);
        assert_eq!(Event::decode(&frame(1, u64::MAX, 0)), None);
    }
}
