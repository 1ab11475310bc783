//! Waiting fairly, measured: (1) the goals of issue 6 in virtual time,
//! llmgov's scheduler beside a first-come line and a greedy queue (admit
//! whoever fits), on the same ledger and arrivals; (2) what waiting costs
//! in real time. `cargo bench -p llmgov --bench waiting`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use llmgov::scheduler::{Outcome, Scheduler, WaiterId};
use llmgov::{Acquire, Config, Error, Governor, Ledger, ManualClock, Request, Route, Usage};

const SECOND: u64 = 1_000_000_000;

fn config(tpm: u64, extra: &str) -> Config {
    Config::from_toml(&format!(
        r#"
        [scopes."p"]
        limits = [{{ dimension = "tokens", amount = {tpm}, window = "1m" }}]
        [scopes."tenants/*"]
        limits = [{{ dimension = "requests", amount = 1000000000, window = "1s" }}]
        {extra}
    "#
    ))
    .unwrap()
}

/// A request as the drivers see it.
#[derive(Clone, Copy)]
struct Job {
    tenant: usize,
    tokens: u64,
    class: &'static str,
    at: u64,
}

/// A way of waiting: queue jobs, admit at `now`, say when to look again.
trait Driver {
    fn name(&self) -> &'static str;
    fn submit(&mut self, ledger: &Ledger, job: Job, now: u64);
    /// Admitted jobs, with their waits.
    fn poll(&mut self, ledger: &Ledger, now: u64) -> Vec<(Job, u64)>;
    fn next(&self) -> Option<u64>;
    fn queued(&self, tenant: usize) -> usize;
}

/// llmgov's scheduler: tenants on their own routes, classes by name.
struct Fair {
    scheduler: Scheduler,
    routes: Vec<Route>,
    jobs: HashMap<WaiterId, Job>,
    queued: Vec<usize>,
    /// The first-come line is this scheduler with every job on one route
    /// and in one class: one flow, served in arrival order, holding the line.
    single_line: bool,
}

impl Fair {
    fn new(config: &Config, ledger: &Ledger, tenants: usize, single_line: bool) -> Self {
        let routes = (0..tenants)
            .map(|t| match single_line {
                true => ledger.route(&["p"]).unwrap(),
                false => ledger.route(&[format!("tenants/t{t}"), "p".into()]).unwrap(),
            })
            .collect();
        let scheduler = Scheduler::new(config).unwrap();
        Fair { scheduler, routes, jobs: HashMap::new(), queued: vec![0; tenants], single_line }
    }
}

impl Driver for Fair {
    fn name(&self) -> &'static str {
        if self.single_line {
            "first-come line"
        } else {
            "llmgov scheduler"
        }
    }

    fn submit(&mut self, ledger: &Ledger, job: Job, now: u64) {
        let class = if self.single_line { "batch" } else { job.class };
        let request = Request::new(self.routes[job.tenant]).input_tokens(job.tokens);
        if let Ok(id) = self.scheduler.submit(ledger, request, class, None, now) {
            self.jobs.insert(id, job);
            self.queued[job.tenant] += 1;
        }
    }

    fn poll(&mut self, ledger: &Ledger, now: u64) -> Vec<(Job, u64)> {
        let mut out = Vec::new();
        self.scheduler.poll(now, &mut |r| ledger.try_acquire(r, now), &mut out);
        let mut admitted = Vec::new();
        for outcome in out {
            let job = self.jobs.remove(&outcome.waiter()).unwrap();
            self.queued[job.tenant] -= 1;
            if let Outcome::Admitted { mut permit, waited, .. } = outcome {
                ledger.settle(&mut permit, Usage::new(job.tokens, 0), now).unwrap();
                admitted.push((job, waited));
            }
        }
        admitted
    }

    fn next(&self) -> Option<u64> {
        self.scheduler.poll_timeout()
    }

    fn queued(&self, tenant: usize) -> usize {
        self.queued[tenant]
    }
}

/// A queue that admits, in arrival order, every job that fits now and
/// skips the others: what a loop over `try_acquire` does.
struct Greedy {
    route: Route,
    line: VecDeque<Job>,
    next: Option<u64>,
    queued: Vec<usize>,
}

impl Driver for Greedy {
    fn name(&self) -> &'static str {
        "greedy (whoever fits)"
    }

    fn submit(&mut self, _: &Ledger, job: Job, now: u64) {
        self.line.push_back(job);
        self.queued[job.tenant] += 1;
        self.next = Some(now);
    }

    fn poll(&mut self, ledger: &Ledger, now: u64) -> Vec<(Job, u64)> {
        let (mut admitted, mut next) = (Vec::new(), None::<u64>);
        let route = self.route;
        self.line.retain(|job| match ledger.try_acquire(&Request::new(route).input_tokens(job.tokens), now) {
            Ok(mut permit) => {
                ledger.settle(&mut permit, Usage::new(job.tokens, 0), now).unwrap();
                admitted.push((*job, now - job.at));
                false
            }
            Err(Error::RateLimited { retry_after, .. }) => {
                let at = now + retry_after.unwrap().as_nanos() as u64;
                next = Some(next.map_or(at, |n| n.min(at)));
                true
            }
            Err(other) => panic!("{other}"),
        });
        for (job, _) in &admitted {
            self.queued[job.tenant] -= 1;
        }
        self.next = next;
        admitted
    }

    fn next(&self) -> Option<u64> {
        self.next
    }

    fn queued(&self, tenant: usize) -> usize {
        self.queued[tenant]
    }
}

fn drivers(config: &Config, ledger: &Ledger, tenants: usize) -> Vec<Box<dyn Driver>> {
    let route = ledger.route(&["p"]).unwrap();
    vec![
        Box::new(Fair::new(config, ledger, tenants, true)),
        Box::new(Greedy { route, line: VecDeque::new(), next: None, queued: vec![0; tenants] }),
        Box::new(Fair::new(config, ledger, tenants, false)),
    ]
}

/// What one run measured.
#[derive(Default)]
struct Run {
    tokens: Vec<u64>,
    waits: Vec<(Job, u64)>,
}

/// Runs `driver` from 0 to `end`: `backlog(t)` is how many jobs of
/// `sizes[t]` tenant `t` keeps queued, `arrivals` are extra jobs at set
/// times. Tokens are counted from `warmup`.
fn run(
    driver: &mut dyn Driver,
    ledger: &Ledger,
    sizes: &[(u64, usize)],
    mut arrivals: Vec<Job>,
    warmup: u64,
    end: u64,
) -> Run {
    let mut result = Run { tokens: vec![0; sizes.len() + 1], ..Run::default() };
    arrivals.sort_by_key(|j| std::cmp::Reverse(j.at));
    let mut now = 0;
    let refill = |driver: &mut dyn Driver, now: u64| {
        for (t, &(size, depth)) in sizes.iter().enumerate() {
            while driver.queued(t) < depth {
                driver.submit(ledger, Job { tenant: t, tokens: size, class: "batch", at: now }, now);
            }
        }
    };
    while now < end {
        while arrivals.last().is_some_and(|j| j.at <= now) {
            let job = arrivals.pop().unwrap();
            driver.submit(ledger, job, now);
        }
        refill(driver, now);
        for (job, waited) in driver.poll(ledger, now) {
            if now >= warmup {
                result.tokens[job.tenant] += job.tokens;
            }
            result.waits.push((job, waited));
        }
        refill(driver, now);
        let arrival = arrivals.last().map_or(u64::MAX, |j| j.at);
        now = driver.next().unwrap_or(u64::MAX).min(arrival).min(end).max(now);
    }
    result
}

fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    sum * sum / (x.len() as f64 * x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>())
}

fn p99(mut waits: Vec<u64>) -> f64 {
    waits.sort_unstable();
    waits.get(waits.len() * 99 / 100).map_or(f64::NAN, |&w| w as f64 / 1e9)
}

fn virtual_time() {
    let (warmup, end) = (2 * 60 * SECOND, 32 * 60 * SECOND);
    println!("## virtual time: 100k TPM, 30 minutes after a 2-minute warm-up\n");
    println!("| scenario | waiting | result |\n|---|---|---|");

    let config = config(100_000, "");
    for i in 0..3 {
        let ledger = Ledger::new(&config).unwrap();
        let mut driver = drivers(&config, &ledger, 4).remove(i);
        let sizes = [(500, 32), (1_000, 32), (2_000, 32), (4_000, 32)];
        let r = run(driver.as_mut(), &ledger, &sizes, vec![], warmup, end);
        let t = &r.tokens[..4];
        let shares: Vec<String> =
            t.iter().map(|&v| format!("{:.1}%", 100.0 * v as f64 / t.iter().sum::<u64>() as f64)).collect();
        println!(
            "| 4 equal tenants, 500/1k/2k/4k-token requests | {} | token shares {} · Jain {:.4} |",
            driver.name(),
            shares.join(" / "),
            jain(t)
        );
    }

    let weighted = self::config(100_000, "[shares.\"tenants/t0\"]\nweight = 3");
    for i in 0..3 {
        let ledger = Ledger::new(&weighted).unwrap();
        let mut driver = drivers(&weighted, &ledger, 2).remove(i);
        let r = run(driver.as_mut(), &ledger, &[(800, 32), (3_000, 32)], vec![], warmup, end);
        println!(
            "| weights 3:1, 800- vs 3000-token requests | {} | token ratio {:.3} |",
            driver.name(),
            r.tokens[0] as f64 / r.tokens[1] as f64
        );
    }

    for i in 0..3 {
        let ledger = Ledger::new(&config).unwrap();
        let mut driver = drivers(&config, &ledger, 6).remove(i);
        let interactive: Vec<Job> = (0..450)
            .map(|k| Job { tenant: 5, tokens: 2_500, class: "interactive", at: warmup + k * 4 * SECOND })
            .collect();
        let sizes = [(4_000, 50), (4_000, 50), (4_000, 50), (4_000, 50), (4_000, 50), (0, 0)];
        let r = run(driver.as_mut(), &ledger, &sizes, interactive, warmup, end);
        let waits: Vec<u64> = r.waits.iter().filter(|(j, _)| j.class == "interactive").map(|(_, w)| *w).collect();
        let batch: u64 = r.tokens[..5].iter().sum();
        println!(
            "| interactive (2.5k tokens every 4 s, max wait 10 s) beside a batch flood | {} | interactive admitted {} of 450, p99 wait {:.2} s · batch {:.0} tokens/min |",
            driver.name(),
            waits.len(),
            p99(waits),
            batch as f64 / 30.0
        );
    }

    for i in 0..3 {
        let ledger = Ledger::new(&config).unwrap();
        let mut driver = drivers(&config, &ledger, 4).remove(i);
        let large = vec![Job { tenant: 3, tokens: 50_000, class: "batch", at: 5 * 60 * SECOND }];
        let r = run(driver.as_mut(), &ledger, &[(500, 8), (500, 8), (500, 8), (0, 0)], large, 0, 60 * 60 * SECOND);
        let wait = r
            .waits
            .iter()
            .find(|(j, _)| j.tenant == 3)
            .map(|(_, w)| format!("admitted after {:.1} s", *w as f64 / 1e9));
        println!(
            "| a 50k-token request behind three tenants streaming 500-token requests (bound 126.7 s) | {} | {} |",
            driver.name(),
            wait.unwrap_or_else(|| "not admitted within the hour".into())
        );
    }
}

/// The median of `runs` timings of `f`, in nanoseconds per `per` operations.
fn time(runs: usize, per: u64, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_nanos() as f64 / per as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[runs / 2]
}

fn poll(future: &mut Acquire) -> bool {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop())).is_ready()
}

fn real_time() {
    println!("\n## real time (median of 15 runs)\n");
    println!("| operation | ns |\n|---|---|");
    let config = Config::from_toml(
        r#"
        [scopes."p"]
        limits = [{ dimension = "tokens", amount = 1000000000000, window = "1m" }]
    "#,
    )
    .unwrap();
    let gov = Governor::new(&config).unwrap();
    let route = gov.route(&["p"]).unwrap();
    let request = Request::new(route).input_tokens(100);
    let n = 100_000;
    let try_ns = time(15, n, || {
        for _ in 0..n {
            let mut p = gov.try_acquire(&request).unwrap();
            gov.settle(&mut p, Usage::new(100, 0)).unwrap();
        }
    });
    let blocking_ns = time(15, n, || {
        for _ in 0..n {
            let mut p = gov.acquire_blocking(&request, None).unwrap();
            gov.settle(&mut p, Usage::new(100, 0)).unwrap();
        }
    });
    println!("| try_acquire + settle, capacity free | {try_ns:.0} |");
    println!(
        "| acquire_blocking + settle, capacity free (no wait) | {blocking_ns:.0} ({:.1} × try_acquire) |",
        blocking_ns / try_ns
    );

    // 10k waiters queued behind an empty bucket, then all admitted by one poll.
    let tight = Config::from_toml(
        r#"
        [scopes."p"]
        limits = [{ dimension = "tokens", amount = 1000000, window = "1m" }]
    "#,
    )
    .unwrap();
    let waiters = 10_000u64;
    let (mut queue_ns, mut admit_ns, mut drop_ns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..15 {
        let clock = Arc::new(ManualClock::new(0));
        let gov = Governor::with_clock(&tight, clock.clone()).unwrap();
        let route = gov.route(&["p"]).unwrap();
        let _all = gov.try_acquire(&Request::new(route).input_tokens(1_000_000)).unwrap();
        let request = Request::new(route).input_tokens(100).class(gov.class("batch"));
        let start = Instant::now();
        let mut futures: Vec<Acquire> = (0..waiters).map(|_| gov.acquire(&request)).collect();
        queue_ns.push(start.elapsed().as_nanos() as f64 / waiters as f64);
        assert!(futures.iter_mut().all(|f| !poll(f)));
        clock.advance(Duration::from_secs(60));
        let start = Instant::now();
        gov.wake_waiters();
        admit_ns.push(start.elapsed().as_nanos() as f64 / waiters as f64);
        assert_eq!(gov.queue_metrics().depth, 0);
        // And 10k more behind the now empty bucket, cancelled by dropping their futures.
        let pending: Vec<Acquire> = (0..waiters).map(|_| gov.acquire(&request)).collect();
        let start = Instant::now();
        drop(pending);
        drop_ns.push(start.elapsed().as_nanos() as f64 / waiters as f64);
        drop(futures);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("| queue one waiter (10k queued, each predicted) | {:.0} |", median(queue_ns));
    println!("| admit one waiter (one poll admits 10k) | {:.0} |", median(admit_ns));
    println!("| withdraw one waiter (drop 10k pending futures) | {:.0} |", median(drop_ns));
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench`-less args; run
    // the virtual-time part only then (it is deterministic and quick).
    let bench = std::env::args().any(|a| a == "--bench");
    virtual_time();
    if bench {
        real_time();
    }
}
