//! The future [`crate::Governor::acquire`] returns, and the guard that makes
//! leaving the queue (a dropped future, a panicking thread) leak nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::waiting::{Slot, Waiting};
use super::WaiterId;
use crate::events::Events;
use crate::{Clock, Ledger, Permit, Result};

/// A request waiting for admission: resolves to its [`Permit`] or to why it
/// was refused. Dropping it before then takes the request out of its queue,
/// and cancels a permit granted to it (at that very moment, or at the call
/// if it was never polled), so nothing leaks.
///
/// It needs no particular async runtime: the governor's own timer thread
/// and the hooks in `settle`/`cancel` wake it. It is `Send + 'static`.
#[must_use = "a request waits only while its Acquire is polled; dropping it leaves the queue"]
#[derive(Debug)]
pub struct Acquire {
    state: State,
}

#[derive(Debug)]
enum State {
    /// Refused at the call: the error, until it is taken.
    Refused(Option<crate::Error>),
    /// Admitted at the call: the permit until it is taken (`None` then),
    /// cancelled if the future is dropped first.
    Admitted(Option<Admitted>),
    Waiting(Guard),
}

/// A permit granted at the call, and what gives it back if nobody takes it.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub permit: Permit,
    pub waiting: Arc<Waiting>,
    pub ledger: Arc<Ledger>,
    pub clock: Arc<dyn Clock>,
}

/// A queued waiter; dropped unanswered, it leaves the queue.
#[derive(Debug)]
pub(crate) struct Guard {
    pub waiting: Arc<Waiting>,
    pub ledger: Arc<Ledger>,
    pub clock: Arc<dyn Clock>,
    pub id: WaiterId,
    pub slot: Arc<Slot>,
    /// Told of a refusal after waiting, on the waiter's own thread (where
    /// no lock is held, as the hook's contract says).
    pub events: Arc<Events>,
    /// The request's traffic class, for the event.
    pub class: Arc<str>,
    pub answered: bool,
    /// `llmgov.wait`: open for as long as the request waits, so a tracing
    /// subscriber sees each wait's length; `outcome` says how it ended.
    pub span: tracing::Span,
}

impl Guard {
    /// Parks the calling thread until the answer comes.
    pub fn wait(mut self) -> Result<Permit> {
        let outcome = self.slot.wait();
        self.answer(outcome)
    }

    fn answer(&mut self, outcome: Result<Permit>) -> Result<Permit> {
        self.answered = true;
        match &outcome {
            Ok(_) => {
                self.span.record("outcome", "admitted");
            }
            Err(error) => {
                self.span.record("outcome", error.code());
                self.events.denied(error, &self.class);
            }
        }
        outcome
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.answered {
            // Refused before it left (its deadline came as the caller gave
            // up): the queue counted the refusal, so the hook and the tally
            // hear of it too, though the caller never took it.
            match self.waiting.leave(self.id, &self.slot, &self.ledger, &*self.clock) {
                Some(refusal) => {
                    self.span.record("outcome", refusal.code());
                    self.events.denied(&refusal, &self.class);
                }
                None => {
                    self.span.record("outcome", "withdrawn");
                }
            }
        }
    }
}

impl Acquire {
    pub(crate) fn refused(error: crate::Error) -> Self {
        Acquire { state: State::Refused(Some(error)) }
    }

    pub(crate) fn admitted(admitted: Admitted) -> Self {
        Acquire { state: State::Admitted(Some(admitted)) }
    }

    pub(crate) fn waiting(guard: Guard) -> Self {
        Acquire { state: State::Waiting(guard) }
    }

    /// Whether the request is still in its queue (not yet answered).
    pub fn is_waiting(&self) -> bool {
        matches!(&self.state, State::Waiting(g) if !g.answered)
    }
}

impl Future for Acquire {
    type Output = Result<Permit>;

    /// # Panics
    /// If polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            State::Refused(error) => Poll::Ready(Err(error.take().expect("Acquire polled after it completed"))),
            State::Admitted(admitted) => {
                Poll::Ready(Ok(admitted.take().expect("Acquire polled after it completed").permit))
            }
            State::Waiting(guard) if guard.answered => panic!("Acquire polled after it completed"),
            State::Waiting(guard) => match guard.slot.poll(cx.waker()) {
                Some(outcome) => Poll::Ready(guard.answer(outcome)),
                None => Poll::Pending,
            },
        }
    }
}

impl Drop for Acquire {
    /// A permit granted at the call and never taken (the future dropped
    /// unpolled, e.g. by a `select!` whose other branch was ready) is
    /// cancelled, as one granted to a waiter that left is. A permit handed
    /// out is the caller's: it is no longer here to cancel.
    fn drop(&mut self) {
        if let State::Admitted(Some(admitted)) = &mut self.state {
            let Admitted { permit, waiting, ledger, clock } = admitted;
            // Pending and ours: cancelling cannot fail.
            let _ = ledger.cancel(permit, clock.now());
            waiting.kick(ledger, &**clock);
        }
    }
}
