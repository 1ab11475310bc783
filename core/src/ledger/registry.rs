//! The scope tree: configured scopes, templates instantiated on first use,
//! and interning of paths to ids. Reads take no lock.

use std::sync::Arc;

use smallvec::SmallVec;

use super::breaker::Breaker;
use super::limit::{Bucket, Limit};
use super::pace::{start_rate, Pace, FULL_RATE, UNSTARTED};
use super::pending::Booked;
use super::unit_plan::RouteScopes;
use crate::config::adaptive::Adaptive;
use crate::dimension::CostKind;
use crate::pricing::Price;
use crate::{Dimension, Error, Result};

/// A scope's position in its registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ScopeIndex(pub u32);

/// A scope interned by a governor: cheap to copy, and valid only with the
/// governor that made it (others refuse it with an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScopeId {
    pub(crate) ledger: u32,
    pub(crate) index: ScopeIndex,
}

/// A scope and the state of each of its limits.
#[derive(Debug)]
pub(crate) struct Scope {
    /// Its place in the registry.
    pub index: ScopeIndex,
    pub path: Arc<str>,
    /// Shared by every scope instantiated from the same template.
    pub limits: Arc<[Limit]>,
    /// `buckets[i]` is the state of `limits[i]`.
    pub buckets: Box<[Bucket]>,
    /// A provider's pool: its answers are fed back into these limits.
    pub provider: bool,
    /// A provider scope's breaker and paces; `None` for llmgov's own budgets.
    pub adaptation: Option<Box<Adaptation>>,
    /// The price of the model this scope serves, if the config gives one.
    pub price: Option<Arc<Price>>,
}

/// What a configured scope or a template gives each scope it makes.
#[derive(Debug, Clone)]
pub(crate) struct ScopeSpec {
    pub limits: Arc<[Limit]>,
    /// A provider's pool: its answers are fed back into these limits.
    pub provider: bool,
    pub price: Option<Arc<Price>>,
}

/// What a provider scope learns from the provider's answers.
#[derive(Debug)]
pub(crate) struct Adaptation {
    pub breaker: Breaker,
    /// `paces[i]` is the pace of `limits[i]` (used by token buckets only).
    pub paces: Box<[Pace]>,
}

impl Scope {
    /// The pace of limit `i`, on a provider scope.
    #[inline]
    pub fn pace(&self, i: usize) -> Option<&Pace> {
        self.adaptation.as_deref().map(|a| &a.paces[i])
    }
}

/// A template path with `*` segments and the limits its scopes get.
#[derive(Debug)]
pub(crate) struct Template {
    /// `None` stands for `*`.
    pub segments: Vec<Option<Box<str>>>,
    pub spec: ScopeSpec,
}

impl Template {
    fn matches(&self, segments: &[&str]) -> bool {
        self.segments.len() == segments.len()
            && self.segments.iter().zip(segments).all(|(t, s)| t.as_deref().is_none_or(|t| t == *s))
    }

    /// Literal segments, leftmost weighted highest: the most specific
    /// template wins (`tenants/acme/*` over `tenants/*/*`).
    fn specificity(&self) -> u64 {
        self.segments.iter().fold(0, |acc, s| (acc << 1) | s.is_some() as u64)
    }
}

/// A set of scopes interned by the governor: what a request charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RouteId(pub u32);

/// An interned route.
#[derive(Debug)]
pub(crate) struct RouteEntry {
    pub scopes: RouteScopes,
    /// The price of its requests, from the one priced scope on it.
    pub price: Option<Price>,
    /// The route of just its provider scopes, where it has others too: what
    /// is learned about a provider's answers is shared by every tenant's
    /// route to it, so per-tenant routes cost no memory of their own there.
    /// `None` when the route is its own provider part (or has none).
    provider_part: Option<RouteId>,
    /// What its permits book: only their count where every limit on the
    /// route charges one per request (requests and concurrency limits) and
    /// no scope adapts to a provider.
    pub booked: Booked,
}

/// The registry of scopes, and of the routes (sets of scopes) requests name.
#[derive(Debug)]
pub(crate) struct Registry {
    by_path: papaya::HashMap<Arc<str>, ScopeIndex>,
    scopes: boxcar::Vec<Arc<Scope>>,
    templates: Vec<Template>,
    /// Routes by id: a permit keeps a 4-byte id instead of a copy of its scopes.
    routes: boxcar::Vec<RouteEntry>,
    route_ids: papaya::HashMap<Box<[ScopeIndex]>, RouteId>,
    /// How provider scopes adapt.
    pub adaptive: Adaptive,
}

/// Scope ids on a route, small enough to live inline for typical depths.
pub(crate) type ScopeList = SmallVec<[ScopeIndex; 8]>;

impl Registry {
    /// A registry of the configured scopes (instantiated now) and templates.
    pub fn new(configured: Vec<(String, ScopeSpec)>, mut templates: Vec<Template>, adaptive: Adaptive) -> Self {
        templates.sort_by_key(|t| std::cmp::Reverse(t.specificity()));
        let registry = Registry {
            by_path: papaya::HashMap::new(),
            scopes: boxcar::Vec::new(),
            templates,
            routes: boxcar::Vec::new(),
            route_ids: papaya::HashMap::new(),
            adaptive,
        };
        for (path, spec) in configured {
            registry.instantiate(&path, &spec, 0);
        }
        registry
    }

    #[inline]
    pub fn get(&self, index: ScopeIndex) -> &Scope {
        &self.scopes[index.0 as usize]
    }

    /// The scope at `index`, if there is one.
    pub fn try_get(&self, index: ScopeIndex) -> Option<&Scope> {
        self.scopes.get(index.0 as usize).map(|scope| &**scope)
    }

    /// The scopes of an interned route, sorted by index.
    #[inline]
    pub fn route(&self, id: RouteId) -> &[Arc<Scope>] {
        &self.routes[id.0 as usize].scopes
    }

    /// An interned route: its scopes and its price.
    #[inline]
    pub fn route_entry(&self, id: RouteId) -> &RouteEntry {
        &self.routes[id.0 as usize]
    }

    /// The route of `id`'s provider scopes (itself, if it has no others, or none).
    pub fn provider_part(&self, id: RouteId) -> RouteId {
        self.routes[id.0 as usize].provider_part.unwrap_or(id)
    }

    /// Interns a set of scopes as a route: sorted, each once. A route with
    /// a `cost` limit needs exactly one price among its scopes.
    pub fn intern_route(&self, mut scopes: ScopeList) -> Result<RouteId> {
        scopes.sort_unstable();
        scopes.dedup();
        let ids = self.route_ids.pin();
        if let Some(id) = ids.get(&scopes[..]) {
            return Ok(*id);
        }
        let price = self.route_price(&scopes)?;
        let providers: ScopeList = scopes.iter().copied().filter(|&s| self.get(s).provider).collect();
        let provider_part = match !providers.is_empty() && providers.len() < scopes.len() {
            true => Some(self.intern_route(providers)?),
            false => None,
        };
        let held: SmallVec<[Arc<Scope>; 2]> = scopes.iter().map(|&s| self.scopes[s.0 as usize].clone()).collect();
        let counts_only =
            held.iter().all(|s| s.adaptation.is_none() && s.limits.iter().all(|l| l.cost_kind == CostKind::One));
        let booked = if counts_only { Booked::Count } else { Booked::All };
        let entry = RouteEntry { scopes: RouteScopes::new(held, counts_only), price, provider_part, booked };
        let index = self.routes.push(entry);
        let id = RouteId(u32::try_from(index).expect("more than 4 billion routes"));
        // As with scopes, a racing twin stays unused.
        Ok(*ids.get_or_insert(scopes.to_vec().into_boxed_slice(), id))
    }

    /// The price of a route's requests: that of its one priced scope (two
    /// priced differently would make the cost ambiguous). A route with a
    /// budget but no price is refused: its budget would count nothing.
    fn route_price(&self, scopes: &[ScopeIndex]) -> Result<Option<Price>> {
        let mut priced: Option<&Scope> = None;
        let mut budgeted: Option<&Scope> = None;
        for scope in scopes.iter().map(|&s| self.get(s)) {
            if budgeted.is_none() && scope.limits.iter().any(|l| l.dimension == Dimension::Cost) {
                budgeted = Some(scope);
            }
            match (priced, scope.price.as_deref()) {
                (Some(first), Some(price)) if first.price.as_deref() != Some(price) => {
                    let reason = format!(
                        "`{}` and `{}` are priced differently; a route takes one price",
                        first.path, scope.path
                    );
                    return Err(route_error(format!("{}, {}", first.path, scope.path), reason));
                }
                (None, Some(_)) => priced = Some(scope),
                _ => {}
            }
        }
        match (priced, budgeted) {
            (None, Some(scope)) => {
                let reason =
                    format!("`{}` has a cost budget, but no scope on the route names a pricing table", scope.path);
                Err(route_error(scope.path.to_string(), reason))
            }
            (priced, _) => Ok(priced.and_then(|s| s.price.as_deref().copied())),
        }
    }

    /// Number of scopes instantiated so far.
    pub fn len(&self) -> usize {
        self.scopes.count()
    }

    /// Every scope reachable by its path, in index order. (A scope that lost
    /// an instantiation race is unreachable, and left out.)
    pub fn iter(&self) -> impl Iterator<Item = (ScopeIndex, &Scope)> {
        let mut indices: Vec<ScopeIndex> = self.by_path.pin().values().copied().collect();
        indices.sort_unstable();
        indices.into_iter().map(|i| (i, self.get(i)))
    }

    /// The id of an existing scope at exactly `path`.
    pub fn lookup(&self, path: &str) -> Option<ScopeIndex> {
        self.by_path.pin().get(path).copied()
    }

    /// Makes the scope at `path`, its paces' ramps counted from `started`.
    fn instantiate(&self, path: &str, spec: &ScopeSpec, started: u64) -> ScopeIndex {
        let by_path = self.by_path.pin();
        if let Some(id) = by_path.get(path) {
            return *id;
        }
        let path: Arc<str> = Arc::from(path);
        let (limits, provider, price) = (spec.limits.clone(), spec.provider, spec.price.clone());
        let buckets = limits.iter().map(Limit::new_bucket).collect();
        let adaptation = provider.then(|| {
            let rate = start_rate(&self.adaptive);
            // A budget is the user's: it never ramps up.
            let rate_of = |l: &Limit| if l.dimension == Dimension::Cost { FULL_RATE } else { rate };
            let paces = limits.iter().map(|l| Pace::new(rate_of(l), started)).collect();
            Box::new(Adaptation { breaker: Breaker::default(), paces })
        });
        let scope_index = |index| ScopeIndex(u32::try_from(index).expect("more than 4 billion scopes"));
        let index = self.scopes.push_with(|index| {
            Arc::new(Scope {
                index: scope_index(index),
                path: path.clone(),
                limits,
                buckets,
                provider,
                adaptation,
                price,
            })
        });
        let id = scope_index(index);
        // Two threads may instantiate the same path at once; the loser's scope
        // stays unreachable, and both use the winner's id.
        *by_path.get_or_insert(path, id)
    }

    /// Checks that `path` is well formed and that some scope or template
    /// covers it, instantiating nothing: a request with one bad path must not
    /// leave template scopes behind for its good ones.
    pub fn check(&self, path: &str) -> Result<()> {
        let segments = split_path(path)?;
        let mut end = 0;
        for (depth, segment) in segments.iter().enumerate() {
            end += segment.len() + usize::from(depth > 0);
            if self.lookup(&path[..end]).is_some() || self.templates.iter().any(|t| t.matches(&segments[..=depth])) {
                return Ok(());
            }
        }
        Err(Error::UnknownScope { path: path.to_owned() })
    }

    /// Every scope on `path`: the configured or template-made scope at each
    /// prefix, root first. Instantiates template scopes met for the first time.
    pub fn resolve(&self, path: &str) -> Result<ScopeList> {
        let segments = split_path(path)?;
        let mut found = ScopeList::new();
        let mut end = 0;
        for (depth, segment) in segments.iter().enumerate() {
            end += segment.len() + usize::from(depth > 0);
            let prefix = &path[..end];
            if let Some(id) = self.lookup(prefix) {
                found.push(id);
            } else if let Some(template) = self.templates.iter().find(|t| t.matches(&segments[..=depth])) {
                // Made at a time the registry does not know: its ramp
                // starts with its first answer (see `Pace::UNSTARTED`).
                found.push(self.instantiate(prefix, &template.spec, UNSTARTED));
            }
        }
        if found.is_empty() {
            return Err(Error::UnknownScope { path: path.to_owned() });
        }
        Ok(found)
    }
}

fn route_error(value: String, reason: String) -> Error {
    Error::InvalidRequest { field: "paths", value, reason }
}

/// Splits a request path into segments, rejecting empty segments and wildcards.
pub(crate) fn split_path(path: &str) -> Result<SmallVec<[&str; 8]>> {
    let invalid = |reason: &str| Error::InvalidPath { path: path.to_owned(), reason: reason.to_owned() };
    if path.is_empty() {
        return Err(invalid("path is empty"));
    }
    // A NUL would cut the path short in C, and any control character would
    // reach logs and Prometheus labels as it is.
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(invalid(&format!("holds the control character {c:?}; scope paths are printable text")));
    }
    let segments: SmallVec<[&str; 8]> = path.split('/').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(invalid("empty segment (leading, trailing or doubled `/`)"));
    }
    if segments.contains(&"*") {
        return Err(invalid("`*` is for templates in the config; a request names concrete scopes"));
    }
    Ok(segments)
}
