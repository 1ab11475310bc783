//! What the scheduler knows of routes (their scopes, flow and share), and
//! how long a new waiter is predicted to wait: refused at once when that is
//! past its deadline, so nobody waits for a failure.

use std::sync::Arc;

use super::flow::{ClassQueue, Cost, RouteInfo, RouteLimit};
use crate::config::classes::{ShareSettings, WaitingSettings};
use crate::ledger::breaker::{Gate, State};
use crate::ledger::limit::Rule;
use crate::{Dimension, Ledger, Result, Route};

/// Builds what the scheduler keeps about `route`.
pub(crate) fn route_info(ledger: &Ledger, settings: &WaitingSettings, route: Route) -> Result<RouteInfo> {
    let ids = ledger.route_scopes(route)?;
    let mut scopes = Vec::with_capacity(ids.len());
    let mut limits = Vec::new();
    let mut shared: Option<(usize, &str, ShareSettings)> = None;
    for &id in &ids {
        let path = ledger.scope_path(id)?;
        let depth = path.split('/').count();
        if let Some(share) = share_of(settings, path) {
            if shared.is_none_or(|(d, _, _)| depth > d) {
                shared = Some((depth, path, share));
            }
        }
        let scope = ledger.registry().get(id.index);
        for (index, limit) in scope.limits.iter().enumerate() {
            limits.push(RouteLimit { scope: id, index, dimension: limit.dimension, kind: limit.cost_kind });
        }
        scopes.push(Arc::from(path));
    }
    // A tenant is the deepest scope with a share; without one, the route.
    let (flow, share) = match shared {
        Some((_, path, share)) => (Arc::from(path), share),
        None => (Arc::from(scopes.iter().map(|s| &**s).collect::<Vec<_>>().join(" + ")), ShareSettings::default()),
    };
    Ok(RouteInfo { scopes, ids, flow, share, limits })
}

/// The share configured at `path` exactly, or by the most specific template
/// matching it (literal segments, leftmost weighted highest, as scopes).
fn share_of(settings: &WaitingSettings, path: &str) -> Option<ShareSettings> {
    if let Some(share) = settings.shares.get(path) {
        return Some(*share);
    }
    let segments: Vec<&str> = path.split('/').collect();
    settings
        .shares
        .iter()
        .filter_map(|(pattern, share)| {
            let pattern: Vec<&str> = pattern.split('/').collect();
            let matches =
                pattern.len() == segments.len() && pattern.iter().zip(&segments).all(|(p, s)| *p == "*" || p == s);
            let specificity = pattern.iter().fold(0u64, |acc, p| (acc << 1) | u64::from(*p != "*"));
            matches.then_some((specificity, *share))
        })
        .max_by_key(|(specificity, _)| *specificity)
        .map(|(_, share)| share)
}

/// The predicted wait, in nanoseconds, of a request costing `cost` on
/// `info` if it joined `classes[class]` now: the time every limit of its
/// route needs to refill what is queued ahead of it (all of any class of
/// higher or equal priority, its own flow's backlog, and of each other flow
/// of its class what deficit round robin serves first) plus its own cost.
/// Only flows whose head shares a scope with the route count. Each limit
/// refills at its effective amount (what AIMD, slow start and discovery
/// left); one still undiscovered, at a request a window; a sliding window,
/// as its charges age out. Concurrency limits are not predicted (they wait
/// on releases); a budget, only until it is no longer all spent. (A cost
/// above a limit's burst was refused before: [`Ledger::check_fits`].)
pub(crate) fn predicted_wait(
    ledger: &Ledger,
    classes: &[ClassQueue],
    class: usize,
    info: &RouteInfo,
    cost: &Cost,
    priority: i32,
    now: u64,
) -> Result<u64> {
    let ahead_on = queued_ahead(classes, class, info, cost, priority);
    let mut wait = 0u64;
    let mut scope = None;
    for limit in &info.limits {
        if limit.dimension == Dimension::Concurrency {
            continue;
        }
        if scope.as_ref().is_none_or(|(id, _)| *id != limit.scope) {
            scope = Some((limit.scope, ledger.scope_snapshot(limit.scope, now)?));
        }
        let snapshot = &scope.as_ref().expect("just set").1;
        let state = &snapshot.limits[limit.index];
        let ahead = &ahead_on[info.ids.iter().position(|id| *id == limit.scope).expect("a route limit's scope")];
        let (queued, mine) = match limit.dimension {
            // A budget: the request's price is not known here, but one with
            // tokens costs something, so it waits at least until the budget
            // is no longer all spent.
            Dimension::Cost => (0, u64::from(cost.input.saturating_add(cost.max_output) > 0)),
            _ => (ahead.on(limit.kind), cost.on(limit.kind)),
        };
        if state.algorithm == "sliding_window" {
            // A window frees when its charges age out, not at a rate.
            wait = wait.max(sliding_window_wait(ledger, limit, queued.saturating_add(mine), now));
            continue;
        }
        let need = (queued as i128 + mine as i128) - state.available as i128;
        if need > 0 {
            let window_ns = state.window_ms.unwrap_or(0) as i128 * 1_000_000;
            // The rate enforced now: after AIMD and slow start, and on a
            // limit left to discovery, the provider's (`amount` is 0 there).
            let ns = match state.effective_amount.unwrap_or(state.amount) {
                // Still undiscovered: the ledger admits one request a window.
                0 => (ahead.requests as i128 + 1) * window_ns,
                rate => (need * window_ns).div_euclid(rate as i128),
            };
            wait = wait.max(ns.min(u64::MAX as i128) as u64);
        }
    }
    Ok(wait)
}

/// The provider scope on `route` whose breaker stays open longest, and
/// until when; `None` when none is open. A breaker whose probe is out
/// (half-open) may close at any moment: it is not predicted.
pub(crate) fn open_breaker(ledger: &Ledger, route: Route, now: u64) -> Result<Option<(Arc<str>, u64)>> {
    let mut longest: Option<(Arc<str>, u64)> = None;
    for id in ledger.route_scopes(route)? {
        let scope = ledger.registry().get(id.index);
        let Some(adaptation) = scope.adaptation.as_deref() else { continue };
        if adaptation.breaker.state(now) != State::Open {
            continue;
        }
        if let Gate::Open(until) = adaptation.breaker.gate(now) {
            if longest.as_ref().is_none_or(|(_, at)| until > *at) {
                longest = Some((scope.path.clone(), until));
            }
        }
    }
    Ok(longest)
}

/// How long until the sliding window of `limit` has room for `units` more
/// (what is queued ahead of a request, and the request): its charges leave
/// oldest first, and what one window cannot hold waits whole windows more.
fn sliding_window_wait(ledger: &Ledger, limit: &RouteLimit, units: u64, now: u64) -> u64 {
    let scope = ledger.registry().get(limit.scope.index);
    let (rule, bucket) = (&scope.limits[limit.index], &scope.buckets[limit.index]);
    let (Rule::SlidingWindow { amount, .. }, Some(window_ns)) = (&rule.rule, rule.window_ns) else { return 0 };
    if units == 0 || *amount == 0 {
        return 0;
    }
    let more_windows = (units - 1) / amount;
    let in_last_window = units - more_windows * amount;
    let room_at = rule.spent_at_most_at(bucket, amount - in_last_window, now);
    room_at.saturating_sub(now).saturating_add(more_windows.saturating_mul(window_ns))
}

/// What is served before a new request costing `cost` at `priority` on
/// `info` in `class`, on each scope of its route (in the order of
/// `info.ids`): a flow's backlog is ahead on the scopes its head charges,
/// and nowhere else; of its own flow in its class, only the waiters of at
/// least its priority.
fn queued_ahead(classes: &[ClassQueue], class: usize, info: &RouteInfo, cost: &Cost, priority: i32) -> Vec<Cost> {
    let mine = &classes[class];
    let own = mine.flows.get(&info.flow).map(|f| f.ahead_of(priority));
    // Deficit round robin gives each other flow `weight / my weight` of
    // what my flow is served until my request is.
    let my_tokens = own.filter(|c| c.requests > 0).map_or(0, |c| c.tokens()).saturating_add(cost.tokens()) as f64;
    let my_weight = info.share.weight as f64;
    let mut ahead = vec![Cost::default(); info.ids.len()];
    for (i, queue) in classes.iter().enumerate() {
        let whole = i != class && queue.settings.priority >= mine.settings.priority;
        if i != class && !whole {
            continue;
        }
        for (key, flow) in &queue.flows {
            let Some(head) = flow.head() else { continue };
            let part = if whole {
                flow.backlog
            } else if *key == info.flow {
                own.unwrap_or_default()
            } else {
                let share = my_tokens * flow.weight as f64 / my_weight;
                flow.backlog.scaled((share / flow.backlog.tokens() as f64).min(1.0))
            };
            for (on, id) in ahead.iter_mut().zip(&info.ids) {
                if head.route.ids.contains(id) {
                    on.add(&part);
                }
            }
        }
    }
    ahead
}
