//! The code's reply against the model's: the same kind, the same slot, tokens through an
//! order-preserving correspondence (the model's are small numbers, the code's are
//! microseconds of the server's `TIME`), PTTLs in whole ticks.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};
use std::time::Duration;

use leasehold::FencingToken;
use leasehold::fuzzing::{AcquireReply, InspectReply, ReleaseReply, RenewReply};
use leasehold_model::line::WaitReply;
use leasehold_model::replay::Answer;
use leasehold_model::server::{self, Token};

/// A reply the code gave.
#[derive(Debug)]
pub enum Reply {
    Acquire(AcquireReply),
    Renew(RenewReply),
    Release(ReleaseReply),
    Inspect(InspectReply),
}

/// The model's tokens and the code's that stand for them: a strictly increasing map, so
/// that whatever order the model's tokens are in, the code's are in too.
#[derive(Debug, Default)]
pub struct Tokens(BTreeMap<Token, u64>);

impl Tokens {
    /// The code's token for the model's, once granted.
    pub fn code(&self, model: Token) -> Option<FencingToken> {
        self.0.get(&model).copied().map(FencingToken::new)
    }

    /// A grant: `model` is new to the model, `code` must be new to the code and sit among
    /// the code's tokens where `model` sits among the model's.
    fn grant(&mut self, model: Token, code: u64) -> Result<(), String> {
        if let Some(known) = self.0.get(&model) {
            return Err(format!(
                "the model granted token {model} again (the code's {known}, now {code})"
            ));
        }
        let below = self.0.range(..model).next_back();
        let above = self.0.range((Excluded(model), Unbounded)).next();
        if below.is_some_and(|(_, &c)| c >= code) || above.is_some_and(|(_, &c)| c <= code) {
            return Err(format!(
                "token order differs: the model's {model} between {below:?} and {above:?} \
                 (model, code), the code's {code}"
            ));
        }
        self.0.insert(model, code);
        Ok(())
    }

    /// A token the model reports again (a replay, an inspection): the code's must be the
    /// one it stood for.
    fn same(&self, model: Token, code: FencingToken) -> Result<(), String> {
        match self.0.get(&model) {
            Some(&known) if known == code.get() => Ok(()),
            known => Err(format!(
                "token {model} stands for the code's {known:?}, the code said {}",
                code.get()
            )),
        }
    }
}

/// A PTTL in the model's ticks: `(k − ½) · tick` give or take half a tick is `k`.
pub fn ticks(pttl: Duration, tick: Duration) -> u128 {
    pttl.as_millis() / tick.as_millis() + 1
}

/// The code's `reply` against the model's `answer`; `left` is what the model's key has
/// left, in ticks, where the reply carries a PTTL the model can state; `tie`: a refusal
/// may be DELAYED or CONTENDED (`replay::refusal_tie`).
pub fn compare(
    answer: Answer,
    reply: &Reply,
    left: Option<server::Time>,
    tie: bool,
    tokens: &mut Tokens,
    tick: Duration,
) -> Result<(), String> {
    use leasehold_model::server::{AcquireReply as A, InspectReply as I, Reply as R};
    let pttl = |pttl: Duration| match left {
        Some(left) if ticks(pttl, tick) != u128::from(left) => Err(format!(
            "PTTL {pttl:?} is {} ticks, the model's key has {left}",
            ticks(pttl, tick)
        )),
        _ => Ok(()),
    };
    let slots = |model: u8, code: u16| match u16::from(model) == code {
        true => Ok(()),
        false => Err(format!("slot {code}, the model's {model}")),
    };
    match (answer, reply) {
        (
            Answer::Acquire(A::Acquired { token, slot }),
            Reply::Acquire(AcquireReply::Acquired {
                token: c, slot: s, ..
            }),
        ) => {
            slots(slot, *s)?;
            tokens.grant(token, c.get())
        }
        (
            Answer::Acquire(A::Replayed { left, token, slot }),
            Reply::Acquire(AcquireReply::Replayed {
                pttl: p,
                token: c,
                slot: s,
            }),
        ) => {
            slots(slot, *s)?;
            tokens.same(token, *c)?;
            let model = u128::from(left);
            match ticks(*p, tick) == model {
                true => Ok(()),
                false => Err(format!("REPLAYED PTTL {p:?}, the model's {left} ticks")),
            }
        }
        (
            Answer::Acquire(A::Delayed | A::Contended),
            Reply::Acquire(AcquireReply::Delayed { .. } | AcquireReply::Contended { .. }),
        ) if tie => Ok(()),
        (Answer::Acquire(A::Conflict), Reply::Acquire(AcquireReply::Conflict { .. }))
        | (Answer::Acquire(A::Contended), Reply::Acquire(AcquireReply::Contended { .. }))
        | (Answer::Acquire(A::Delayed), Reply::Acquire(AcquireReply::Delayed { .. }))
        | (Answer::Renew(R::Done), Reply::Renew(RenewReply::Renewed))
        | (Answer::Renew(R::Absent), Reply::Renew(RenewReply::Absent))
        | (Answer::Renew(R::NotOwner), Reply::Renew(RenewReply::NotOwner))
        | (Answer::Release(R::Done), Reply::Release(ReleaseReply::Released))
        | (Answer::Release(R::Absent), Reply::Release(ReleaseReply::Absent))
        | (Answer::Release(R::NotOwner), Reply::Release(ReleaseReply::NotOwner))
        | (Answer::Inspect(I::Absent), Reply::Inspect(InspectReply::Absent)) => Ok(()),
        (
            Answer::Inspect(I::HeldByAttempt(token)),
            Reply::Inspect(InspectReply::HeldByAttempt {
                pttl: p, token: c, ..
            }),
        )
        | (
            Answer::Inspect(I::HeldByOther(token)),
            Reply::Inspect(InspectReply::HeldByOther {
                pttl: p, token: c, ..
            }),
        )
        | (
            Answer::Inspect(I::Delayed(token)),
            Reply::Inspect(InspectReply::Delayed {
                pttl: p, token: c, ..
            }),
        ) => {
            tokens.same(token, *c)?;
            pttl(*p)
        }
        (answer, reply) => Err(format!("the code said {reply:?}, the model {answer:?}")),
    }
}

/// A W's reply against the model's: the acquisition's as a try's (`compare`), and the
/// rank a refusal carries — the model's place in its line, the code's in the server's.
pub fn compare_wait(
    answer: WaitReply,
    reply: AcquireReply,
    tie: bool,
    tokens: &mut Tokens,
    tick: Duration,
) -> Result<(), String> {
    let rank = match reply {
        AcquireReply::Contended { rank, .. } | AcquireReply::Delayed { rank, .. } => rank,
        _ => None,
    };
    let acquire = Answer::Acquire(answer.reply);
    compare(acquire, &Reply::Acquire(reply), None, tie, tokens, tick)?;
    match rank == answer.rank.map(u32::from) {
        true => Ok(()),
        false => Err(format!(
            "rank {rank:?} in the line, the model's {:?} ({reply:?})",
            answer.rank
        )),
    }
}

/// An acquisition reply's word: `ACQUIRED`, `CONTENDED`…
pub fn kind_of(reply: server::AcquireReply) -> &'static str {
    use leasehold_model::server::AcquireReply as A;
    match reply {
        A::Acquired { .. } => "ACQUIRED",
        A::Replayed { .. } => "REPLAYED",
        A::Conflict => "CONFLICT",
        A::Contended => "CONTENDED",
        A::Delayed => "DELAYED",
    }
}

/// A reply's kind, for the counts the test prints: `acquire ACQUIRED`, `inspect ABSENT`.
pub fn kind(answer: Answer) -> String {
    use leasehold_model::server::{InspectReply as I, Reply as R};
    let (op, word) = match answer {
        Answer::Acquire(a) => ("acquire", kind_of(a)),
        Answer::Renew(r) | Answer::Release(r) => {
            let op = if matches!(answer, Answer::Renew(_)) {
                "renew"
            } else {
                "release"
            };
            let done = if op == "renew" { "RENEWED" } else { "RELEASED" };
            (
                op,
                match r {
                    R::Done => done,
                    R::Absent => "ABSENT",
                    R::NotOwner => "NOT_OWNER",
                },
            )
        }
        Answer::Inspect(i) => (
            "inspect",
            match i {
                I::HeldByAttempt(_) => "HELD_BY_ATTEMPT",
                I::HeldByOther(_) => "HELD_BY_OTHER",
                I::Delayed(_) => "DELAYED",
                I::Absent => "ABSENT",
            },
        ),
    };
    format!("{op} {word}")
}
