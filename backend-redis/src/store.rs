//! All Redis I/O: a small pool of sync connections and the Lua scripts,
//! each call touching the keys of one shared scope (one hash slot).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmgov::Clock;

use parking_lot::Mutex;
use redis::{ConnectionLike, ErrorKind, RedisResult, Script, ScriptInvocation, ServerErrorKind, Value};

use crate::server::{Link, Server};
use crate::shared::{Kind, SharedScope};

/// Connections kept idle for reuse; more are opened under load.
const MAX_IDLE: usize = 16;
/// A connection idle this long is closed rather than reused: servers and
/// proxies close idle connections (Redis's `timeout`, a load balancer's
/// idle limit), and a settle sent on one is not run again whole.
const IDLE_LIMIT_NS: u64 = 30_000_000_000;
/// How often one call follows a Cluster's redirections (`MOVED` to a fresh
/// slot map, `ASK` to a slot's importing node): a slot may move again
/// meanwhile.
const MAX_REDIRECTS: usize = 3;
/// The first pause before a call a Cluster node answered `TRYAGAIN` runs
/// again: a reshard moves a slot's next batch of keys in about that.
const FIRST_TRYAGAIN_PAUSE: Duration = Duration::from_millis(1);

/// What the acquire script answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// Reserved; `epoch` is the state's generation, `reset` whether the
    /// state was found lost and restarted at the safe share.
    Admitted { epoch: String, reset: bool },
    /// Refused by the limit at `limit` (0-based); `retry_us` is `None` for
    /// concurrency.
    Refused { limit: usize, retry_us: Option<u64>, epoch: String, reset: bool },
}

/// One shared scope's reconciliation: slot to free and GCRA deltas.
pub(crate) struct Reconcile<'a> {
    pub epoch: &'a str,
    pub slot: Option<&'a str>,
    /// `(limit index, signed delta in units)` for rate limits.
    pub deltas: &'a [(usize, i64)],
}

/// What one acquire asks of one shared scope.
pub(crate) struct Ask<'a> {
    /// One cost per limit of the scope.
    pub costs: &'a [u64],
    /// The epoch this process saw last, if any.
    pub seen_epoch: Option<&'a str>,
    /// The epoch to write if the state is missing.
    pub fresh_epoch: &'a str,
    /// What a lost state restarts at, as a fraction of each burst.
    pub safe_share: f64,
    /// The concurrency slot's id ("" when the scope has none).
    pub slot: &'a str,
    pub slot_ttl_us: u64,
}

/// One lease exchange: what goes back and what is wanted, per limit.
pub(crate) struct LeaseAsk<'a> {
    pub seen_epoch: Option<&'a str>,
    pub fresh_epoch: &'a str,
    pub safe_share: f64,
    /// This process's lease id on the scope.
    pub lease_id: &'a str,
    pub ttl_us: u64,
    /// The epoch the returned lease was granted under.
    pub returned_epoch: Option<&'a str>,
    /// The returned lease's token: its unused units go back only if Redis
    /// still records that very lease (a retried call never refunds twice).
    pub returned_token: Option<&'a str>,
    /// The new lease's token.
    pub token: &'a str,
    /// Per limit: unused units (positive) or units charged past the lease (negative).
    pub give_back: &'a [i64],
    /// Per limit: units wanted.
    pub want: &'a [u64],
    /// Per limit: what the request at hand costs (0: none is at hand).
    pub cost: &'a [u64],
}

/// What the lease script granted.
pub(crate) struct LeaseGrant {
    pub epoch: String,
    pub reset: bool,
    pub grants: Vec<u64>,
    /// Per limit: in how many microseconds the request's cost would fit
    /// (0 where it fits now). Nothing is granted unless it fits on all.
    pub waits_us: Vec<u64>,
}

pub(crate) struct Store {
    server: Server,
    calls: AtomicU64,
    timeout: Duration,
    /// The governor's clock, to age idle connections.
    clock: Arc<dyn Clock>,
    /// Idle connections, each with when it was last used.
    idle: Mutex<Vec<(Link, u64)>>,
    acquire: Script,
    settle: Script,
    heartbeat: Script,
    lease: Script,
    hold: Script,
}

impl Store {
    pub fn new(server: Server, timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        Store {
            server,
            timeout,
            clock,
            idle: Mutex::new(Vec::new()),
            acquire: Script::new(include_str!("../lua/acquire.lua")),
            settle: Script::new(include_str!("../lua/settle.lua")),
            heartbeat: Script::new(include_str!("../lua/heartbeat.lua")),
            lease: Script::new(include_str!("../lua/lease.lua")),
            hold: Script::new(include_str!("../lua/hold.lua")),
            calls: AtomicU64::new(0),
        }
    }

    /// Runs `call` on a pooled connection (a new one if none is idle, or
    /// the idle ones are past [`IDLE_LIMIT_NS`]); a connection that failed
    /// is dropped. A connection found closed (a restart, the server's idle
    /// `timeout`, a proxy) is no outage: the pool is emptied (its other
    /// connections are likely closed too) and `again` runs on a new one.
    /// The closed connection may have delivered the call first (its reply
    /// lost), so `again` must be safe to run after it: the call itself if
    /// running it twice only reserves twice or changes nothing more, or the
    /// call without its refunds. A Cluster node's `MOVED` (the slot has
    /// moved since the pool's slot map was read) ran nothing: the call runs
    /// again on a new connection, which reads the map afresh. Nor did its
    /// `ASK` (the slot is migrating, and the keys are on the importing node
    /// already): the call runs again there, after `ASKING`. Nor did its
    /// `TRYAGAIN` (the slot is migrating, and the call's keys are split
    /// between the nodes until the reshard's next batch moves the rest): the
    /// call runs again after a pause, doubling from 1 ms, as long as the
    /// pauses add up to no more than `timeout`.
    fn with<T>(
        &self,
        call: &dyn Fn(&mut dyn ConnectionLike) -> RedisResult<T>,
        again: &dyn Fn(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut link = match self.pooled() {
            Some(link) => link,
            None => self.server.connect(self.timeout)?,
        };
        let mut result = call(link.as_connection());
        // What a redirect runs: once `again` has run, the call may have
        // been delivered, so never the whole call.
        let mut redirected = call;
        if result.as_ref().is_err_and(|e| e.is_connection_dropped()) {
            self.drop_idle();
            self.calls.fetch_add(1, Ordering::Relaxed);
            link = self.server.connect(self.timeout)?;
            result = again(link.as_connection());
            redirected = again;
        }
        let result = self.follow_redirects(&mut link, result, redirected);
        if result.is_ok() {
            let mut idle = self.idle.lock();
            if idle.len() < MAX_IDLE {
                idle.push((link, self.clock.now()));
            }
        }
        result
    }

    /// [`Self::with`]'s answers to a Cluster's `TRYAGAIN`, `MOVED` and
    /// `ASK`, each of which ran nothing: `redirected` runs again.
    fn follow_redirects<T>(
        &self,
        link: &mut Link,
        mut result: RedisResult<T>,
        redirected: &dyn Fn(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut redirects = 0;
        let mut pause = FIRST_TRYAGAIN_PAUSE;
        let mut paused = Duration::ZERO;
        while redirects < MAX_REDIRECTS {
            let Err(error) = &result else { break };
            match error.kind() {
                // Real time, as the socket timeouts are: this waits on
                // Redis, not on the governor's clock.
                ErrorKind::Server(ServerErrorKind::TryAgain) if paused + pause <= self.timeout => {
                    std::thread::sleep(pause);
                    paused += pause;
                    pause *= 2;
                    self.calls.fetch_add(1, Ordering::Relaxed);
                    result = redirected(link.as_connection());
                    continue;
                }
                ErrorKind::Server(ServerErrorKind::Moved) => {
                    redirects += 1;
                    // The pooled links hold the same stale map.
                    self.drop_idle();
                    self.calls.fetch_add(1, Ordering::Relaxed);
                    *link = self.server.connect(self.timeout)?;
                    result = redirected(link.as_connection());
                }
                ErrorKind::Server(ServerErrorKind::Ask) => {
                    let node = error.redirect_node().map(|(node, _slot)| node.to_owned());
                    let Some(mut asking) = node.as_deref().and_then(|node| link.asking(node)) else { break };
                    redirects += 1;
                    self.calls.fetch_add(1, Ordering::Relaxed);
                    result = redirected(&mut asking);
                }
                _ => break,
            }
        }
        result
    }

    /// The most recently used idle connection, unless it is past
    /// [`IDLE_LIMIT_NS`] (then the older ones are too, and all are closed).
    fn pooled(&self) -> Option<Link> {
        let now = self.clock.now();
        let mut idle = self.idle.lock();
        match idle.pop() {
            Some((link, used)) if now.saturating_sub(used) <= IDLE_LIMIT_NS => Some(link),
            _ => {
                idle.clear();
                None
            }
        }
    }

    /// Redis calls made so far (one script each).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Forgets every pooled connection (after an error, they may be dead).
    pub fn drop_idle(&self) {
        self.idle.lock().clear();
    }

    /// In a forked child: the pooled sockets are the parent's too. They are
    /// leaked, not closed, so nothing (a TLS goodbye) is written to them.
    pub fn leave_idle_to_parent(&self) {
        for (link, _) in self.idle.lock().drain(..) {
            std::mem::forget(link);
        }
    }

    /// Reserves the ask's costs on `scope`, all or nothing.
    pub fn acquire(&self, scope: &SharedScope, ask: &Ask<'_>) -> RedisResult<Admission> {
        let mut call = self.acquire.key(&scope.state_key);
        scope_slots(&mut call, scope)
            .arg(ask.seen_epoch.unwrap_or(""))
            .arg(ask.fresh_epoch)
            .arg(ask.safe_share)
            .arg(ask.slot)
            .arg(ask.slot_ttl_us);
        for (limit, cost) in scope.limits.iter().zip(ask.costs) {
            match limit.kind {
                Kind::Rate { interval_us, burst } => call.arg("g").arg(&limit.field).arg(interval_us).arg(burst),
                Kind::Concurrency { capacity } => call.arg("c").arg("").arg(capacity).arg(0),
            };
            call.arg(*cost);
        }
        // Run twice, it reserves twice: capacity lost until it refills, never given away.
        let run = |c: &mut dyn ConnectionLike| call.invoke::<Vec<Value>>(c);
        parse_admission(&self.with(&run, &run)?)
    }

    /// Applies a reconciliation to `scope`; if its connection was found
    /// closed, again without its refunds (run twice, they would be given
    /// twice; a charge or a freed slot twice does no harm).
    pub fn settle(&self, scope: &SharedScope, reconcile: &Reconcile<'_>) -> RedisResult<()> {
        let call = |refunds: bool| {
            let mut call = self.settle.key(&scope.state_key);
            scope_slots(&mut call, scope).arg(reconcile.epoch).arg(reconcile.slot.unwrap_or(""));
            for &(limit, delta) in reconcile.deltas {
                let limit = &scope.limits[limit];
                let Kind::Rate { interval_us, .. } = limit.kind else { continue };
                if delta > 0 || refunds {
                    call.arg(&limit.field).arg(interval_us).arg(delta);
                }
            }
            call
        };
        let (whole, charges) = (call(true), call(false));
        self.with(&|c| whole.invoke::<i64>(c), &|c| charges.invoke::<i64>(c)).map(drop)
    }

    /// Extends the expiry of the slots held on `scope`, each given with the
    /// state epoch it was taken under; a slot of another epoch (the state
    /// was lost since) is added again. Returns the state's epoch now ("" if
    /// it has none).
    pub fn heartbeat(&self, scope: &SharedScope, slots: &[(String, String)], ttl_us: u64) -> RedisResult<String> {
        let mut call = self.heartbeat.key(&scope.slots_key);
        call.key(&scope.state_key).arg(ttl_us);
        for (slot, epoch) in slots {
            call.arg(slot).arg(epoch);
        }
        // Run twice, it refreshes twice: no harm.
        let run = |c: &mut dyn ConnectionLike| call.invoke::<String>(c);
        self.with(&run, &run)
    }
}

impl Store {
    /// Holds rate limits of `scope` empty for every process: `(limit index,
    /// microseconds)` each (a provider's 429 said to come back then).
    /// Concurrency has no timeline to hold and is skipped.
    pub fn hold(&self, scope: &SharedScope, holds: &[(usize, u64)]) -> RedisResult<()> {
        let mut call = self.hold.key(&scope.state_key);
        for &(limit, hold_us) in holds {
            let limit = &scope.limits[limit];
            let Kind::Rate { interval_us, burst } = limit.kind else { continue };
            call.arg(&limit.field).arg(interval_us).arg(burst).arg(hold_us);
        }
        // Run twice, it holds until the later of the two ends: no harm.
        let run = |c: &mut dyn ConnectionLike| call.invoke::<i64>(c);
        self.with(&run, &run).map(drop)
    }

    /// Returns the previous lease on `scope` and takes a new one.
    pub fn lease(&self, scope: &SharedScope, ask: &LeaseAsk<'_>) -> RedisResult<LeaseGrant> {
        let mut call = self.lease.key(&scope.state_key);
        call.key(&scope.leases_key)
            .key(&scope.expiries_key)
            .arg(ask.seen_epoch.unwrap_or(""))
            .arg(ask.fresh_epoch)
            .arg(ask.safe_share)
            .arg(ask.lease_id)
            .arg(ask.ttl_us)
            .arg(ask.returned_epoch.unwrap_or(""))
            .arg(ask.returned_token.unwrap_or(""))
            .arg(ask.token);
        for (((limit, give), want), cost) in scope.limits.iter().zip(ask.give_back).zip(ask.want).zip(ask.cost) {
            let Kind::Rate { interval_us, burst } = limit.kind else { continue };
            call.arg(&limit.field).arg(interval_us).arg(burst).arg(*give).arg(*want).arg(*cost);
        }
        // Run twice, the lease's token keeps it from refunding twice.
        let run = |c: &mut dyn ConnectionLike| call.invoke::<Vec<Value>>(c);
        let reply = self.with(&run, &run)?;
        let epoch: String = redis::from_redis_value_ref(field(&reply, 0)?)?;
        let reset: i64 = redis::from_redis_value_ref(field(&reply, 1)?)?;
        let counts = reply[2..].iter().map(redis::from_redis_value_ref::<u64>).collect::<Result<Vec<_>, _>>()?;
        let (grants, waits_us) = counts.split_at(counts.len() / 2);
        Ok(LeaseGrant { epoch, reset: reset == 1, grants: grants.to_vec(), waits_us: waits_us.to_vec() })
    }
}

/// Names the scope's slots key to a script only where the scope has
/// concurrency slots: on a Cluster, a slot being migrated is served by its
/// old node only while that node holds every key a call names, and a
/// scope without concurrency never has that key.
fn scope_slots<'a, 's>(call: &'a mut ScriptInvocation<'s>, scope: &SharedScope) -> &'a mut ScriptInvocation<'s> {
    if scope.has_slots() {
        call.key(&scope.slots_key);
    }
    call
}

fn parse_admission(reply: &[Value]) -> RedisResult<Admission> {
    let int = |i: usize| -> RedisResult<i64> { Ok(redis::from_redis_value_ref(field(reply, i)?)?) };
    let text = |i: usize| -> RedisResult<String> { Ok(redis::from_redis_value_ref(field(reply, i)?)?) };
    if int(0)? == 1 {
        return Ok(Admission::Admitted { epoch: text(1)?, reset: int(2)? == 1 });
    }
    let retry = int(2)?;
    Ok(Admission::Refused {
        limit: usize::try_from(int(1)? - 1).unwrap_or(0),
        retry_us: u64::try_from(retry).ok(),
        epoch: text(3)?,
        reset: int(4)? == 1,
    })
}

fn field(reply: &[Value], i: usize) -> RedisResult<&Value> {
    reply
        .get(i)
        .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "short reply from a script")))
}
