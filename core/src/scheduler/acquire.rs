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
/// was refused. Dropping it before then takes the request out of its queue;
/// a permit granted at that very moment is cancelled, so nothing leaks.
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
    Done(Option<Result<Permit>>),
    Waiting(Guard),
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
            self.span.record("outcome", "withdrawn");
            self.waiting.leave(self.id, &self.slot, &self.ledger, &*self.clock);
        }
    }
}

impl Acquire {
    pub(crate) fn done(outcome: Result<Permit>) -> Self {
        Acquire { state: State::Done(Some(outcome)) }
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
            State::Done(outcome) => Poll::Ready(outcome.take().expect("Acquire polled after it completed")),
            State::Waiting(guard) if guard.answered => panic!("Acquire polled after it completed"),
            State::Waiting(guard) => match guard.slot.poll(cx.waker()) {
                Some(outcome) => Poll::Ready(guard.answer(outcome)),
                None => Poll::Pending,
            },
        }
    }
}
