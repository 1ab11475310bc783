//! The discrete-event loop: virtual time in nanoseconds, events ordered by
//! (time, sequence) so that a run is deterministic, a provider model that
//! admits or refuses, a network between them, and a client strategy that
//! reacts to each event with commands (send now, wake me at, give up).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::SystemTime;

use super::workload::Job;
use crate::error::CliError;
use crate::provider::{Admitted, Provider, ProviderConfig, ProviderUsage, Rejected};

/// A run that has not ended after a week of virtual time is stuck (a
/// strategy retrying a refusal that never lifts): stop it rather than spin.
pub(crate) const MAX_VIRTUAL_NS: u64 = 7 * 24 * 3600 * 1_000_000_000;

/// Attempts per request past which a run is stuck too (every answer a
/// refusal, retried at once): the shipped scenarios' naive strategies make
/// at most a few hundred, and a week of virtual time at a few ms a retry
/// would take hours of real time to reach.
const MAX_ATTEMPTS_PER_REQUEST: u64 = 10_000;

/// A wake-up a strategy asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// Send (or queue) this job again.
    Retry(usize),
    /// Look at the waiting line again.
    Gate,
}

/// Requests travel to the provider and answers back: the provider sees a
/// request `network_ns` after the client sent it, and the client its answer
/// `network_ns` after the provider gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A job arrives at the client.
    Arrive(usize),
    /// A strategy's timer.
    Wake(Timer),
    /// A request reaches the provider.
    Deliver(usize),
    /// The provider has finished a request.
    Finish(usize),
    /// Its answer reaches the client.
    Answer(usize),
}

/// What the provider answered.
#[derive(Debug, Clone)]
enum Answer {
    Refused(Rejected),
    Done(ProviderUsage, Vec<(String, String)>),
}

/// What a strategy asks the engine to do.
#[derive(Debug, Clone, Copy)]
enum Command {
    Send(usize),
    At(u64, Timer),
    Fail(usize),
}

/// A strategy's view of the run while it handles an event: the workload,
/// and where its commands go.
pub(crate) struct Cx<'a> {
    pub jobs: &'a [Job],
    commands: VecDeque<Command>,
}

impl Cx<'_> {
    /// Sends the job to the provider now.
    pub fn send(&mut self, job: usize) {
        self.commands.push_back(Command::Send(job));
    }

    /// Wakes the strategy with `timer` at `at` (never before now).
    pub fn at(&mut self, at: u64, timer: Timer) {
        self.commands.push_back(Command::At(at, timer));
    }

    /// Gives the job up: it ends unserved.
    pub fn fail(&mut self, job: usize) {
        self.commands.push_back(Command::Fail(job));
    }
}

/// A client strategy, driven by the engine's events.
pub(crate) trait Client {
    /// A job arrives.
    fn arrive(&mut self, now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError>;
    /// A timer it set fires.
    fn wake(&mut self, now: u64, timer: Timer, cx: &mut Cx) -> Result<(), CliError>;
    /// The provider refused a job it sent.
    fn rejected(&mut self, now: u64, job: usize, rejected: &Rejected, cx: &mut Cx) -> Result<(), CliError>;
    /// A job it sent has completed with this usage and these rate-limit headers.
    fn finished(
        &mut self,
        now: u64,
        job: usize,
        usage: ProviderUsage,
        headers: &[(String, String)],
        cx: &mut Cx,
    ) -> Result<(), CliError>;
}

/// What happened to one job.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    /// When the provider admitted the attempt that succeeded.
    pub admitted_at: Option<u64>,
    /// When the client had its answer, or gave it up.
    pub ended_at: u64,
    pub succeeded: bool,
    pub output_tokens: u64,
}

/// The raw results of one strategy's run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Run {
    pub outcomes: Vec<Outcome>,
    /// Requests sent to the provider, refused or not.
    pub attempts: u64,
    /// Refusals with status 429.
    pub rejected_429: u64,
    /// When the last of them was made.
    pub last_429_ns: Option<u64>,
    /// Other refusals (5xx, 529).
    pub rejected_other: u64,
}

/// One strategy's run against a fresh provider.
struct Engine<'a> {
    provider: Provider,
    network_ns: u64,
    jobs: &'a [Job],
    queue: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    in_flight: Vec<Option<Admitted>>,
    answers: Vec<Option<Answer>>,
    run: Run,
}

impl<'a> Engine<'a> {
    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, event)));
    }

    /// Carries out the commands a strategy gave.
    fn apply(&mut self, now: u64, cx: &mut Cx<'a>) {
        while let Some(command) = cx.commands.pop_front() {
            match command {
                Command::Send(job) => {
                    self.run.attempts += 1;
                    self.schedule(now.saturating_add(self.network_ns), Event::Deliver(job));
                }
                Command::At(at, timer) => self.schedule(at.max(now), Event::Wake(timer)),
                Command::Fail(job) => self.run.outcomes[job].ended_at = now,
            }
        }
    }

    /// The provider admits or refuses a request that reached it.
    fn deliver(&mut self, now: u64, job: usize) {
        match self.provider.admit(now, &self.jobs[job].request()) {
            Ok(admitted) => {
                self.run.outcomes[job].admitted_at = Some(now);
                self.schedule(now.saturating_add(admitted.duration_ns), Event::Finish(job));
                self.in_flight[job] = Some(admitted);
            }
            Err(rejected) => {
                if rejected.status == 429 {
                    self.run.rejected_429 += 1;
                    self.run.last_429_ns = Some(now);
                } else {
                    self.run.rejected_other += 1;
                }
                self.answers[job] = Some(Answer::Refused(rejected));
                self.schedule(now.saturating_add(self.network_ns), Event::Answer(job));
            }
        }
    }

    fn handle(&mut self, now: u64, event: Event, client: &mut dyn Client, cx: &mut Cx) -> Result<(), CliError> {
        match event {
            Event::Arrive(job) => client.arrive(now, job, cx),
            Event::Wake(timer) => client.wake(now, timer, cx),
            Event::Deliver(job) => {
                self.deliver(now, job);
                Ok(())
            }
            Event::Finish(job) => {
                let admitted = self.in_flight[job].take().expect("a finish follows an admission");
                let (usage, headers) = self.provider.finish(now, &admitted);
                self.answers[job] = Some(Answer::Done(usage, headers));
                self.schedule(now.saturating_add(self.network_ns), Event::Answer(job));
                Ok(())
            }
            Event::Answer(job) => match self.answers[job].take().expect("an answer was sent") {
                Answer::Refused(rejected) => client.rejected(now, job, &rejected, cx),
                Answer::Done(usage, headers) => {
                    let outcome = &mut self.run.outcomes[job];
                    (outcome.ended_at, outcome.succeeded, outcome.output_tokens) = (now, true, usage.output_tokens);
                    client.finished(now, job, usage, &headers, cx)
                }
            },
        }
    }
}

/// Runs `client` over the workload against a provider built from `config`
/// and `seed`, `network_ns` away. `label` names the strategy in errors.
pub(crate) fn run(
    config: &ProviderConfig,
    seed: u64,
    network_ns: u64,
    jobs: &[Job],
    client: &mut dyn Client,
    label: &str,
) -> Result<Run, CliError> {
    let provider = Provider::new(config.clone(), seed, SystemTime::UNIX_EPOCH)?;
    let run = Run { outcomes: vec![Outcome::default(); jobs.len()], ..Run::default() };
    let (in_flight, answers) = (vec![None; jobs.len()], vec![None; jobs.len()]);
    let mut engine = Engine { provider, network_ns, jobs, queue: BinaryHeap::new(), seq: 0, in_flight, answers, run };
    for job in jobs {
        engine.schedule(job.arrival, Event::Arrive(job.id));
    }
    let mut cx = Cx { jobs, commands: VecDeque::new() };
    let max_attempts = (jobs.len() as u64).saturating_mul(MAX_ATTEMPTS_PER_REQUEST);
    while let Some(Reverse((now, _, event))) = engine.queue.pop() {
        if now > MAX_VIRTUAL_NS {
            return Err(CliError::field("strategies", label, "did not finish within a week of virtual time"));
        }
        engine.handle(now, event, client, &mut cx)?;
        engine.apply(now, &mut cx);
        if engine.run.attempts > max_attempts {
            let reason = format!(
                "sent more than {MAX_ATTEMPTS_PER_REQUEST} attempts per request: is every answer a refusal? \
                 (lower the chaos fractions, or give it max_retries)"
            );
            return Err(CliError::field("strategies", label, reason));
        }
    }
    Ok(engine.run)
}
