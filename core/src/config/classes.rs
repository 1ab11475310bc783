//! Waiting configuration: traffic classes (`[classes.<name>]`) and the
//! shares scopes get of what they wait for (`[shares."<path>"]`), validated
//! into the settings the [`crate::scheduler::Scheduler`] runs on.
//!
//! ```toml
//! [classes.interactive]        # override a default class, or name a new one
//! priority = 10                # higher classes are served first
//! queue_bound = 500            # waiters; the next one is refused with queue_full
//! max_wait = "5s"              # no request of the class waits longer
//! quantum = 4096               # deficit round robin: tokens per unit of weight per round
//!
//! [shares."tenants/*"]         # every tenant (a template), or one scope by path
//! weight = 1
//! [shares."tenants/acme"]
//! weight = 3                   # served 3:1 against weight-1 tenants when both wait
//! guarantee = 20000            # tokens per window served first, before any borrowing
//! ceiling = 60000              # never more than this per window, borrowed or not
//! window = "1m"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One traffic class's queue: every field optional, defaulting to the
/// built-in class of that name (or to the unnamed default class).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    /// Classes of higher priority are served first, strictly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The most requests of this class that may wait at once (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_bound: Option<usize>,
    /// The longest a request of this class may wait, e.g. `"30s"`; a
    /// request's own deadline may only shorten it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<String>,
    /// Deficit round robin quantum: tokens a tenant of weight 1 may be
    /// admitted per round (at least 1; default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantum: Option<u64>,
}

/// What one scope (or every scope of a template) gets of the capacity its
/// requests wait for: a weight in fair sharing, and optionally a guaranteed
/// rate and a ceiling, after Linux HTB.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareConfig {
    /// Relative share among waiting tenants of a class (at least 1; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Tokens per `window` this scope's waiters are served first, before
    /// anyone borrows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<u64>,
    /// Tokens per `window` this scope is never served beyond, guaranteed and
    /// borrowed together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<u64>,
    /// The window of `guarantee` and `ceiling` (default `"1m"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// A class's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSettings {
    /// Higher is served first.
    pub priority: i32,
    /// The most waiters at once.
    pub queue_bound: usize,
    /// The longest wait, in nanoseconds.
    pub max_wait_ns: u64,
    /// DRR tokens per unit of weight per round.
    pub quantum: u64,
}

/// The built-in classes, from most to least urgent, with their defaults:
/// `(name, priority, queue_bound, max_wait)`.
pub const DEFAULT_CLASSES: [(&str, i32, usize, Duration); 5] = [
    ("interactive", 40, 1_000, Duration::from_secs(10)),
    ("agent", 30, 10_000, Duration::from_secs(60)),
    ("batch", 20, 100_000, Duration::from_secs(3600)),
    ("eval", 10, 100_000, Duration::from_secs(3600)),
    ("background", 0, 100_000, Duration::from_secs(24 * 3600)),
];

/// The settings of the unnamed class and of any class named only in code
/// (`Governor::class`) and not in the config: between agent and batch.
pub const DEFAULT_CLASS: ClassSettings =
    ClassSettings { priority: 25, queue_bound: 10_000, max_wait_ns: 600_000_000_000, quantum: DEFAULT_QUANTUM };

/// Default DRR quantum, in tokens per unit of weight.
pub const DEFAULT_QUANTUM: u64 = 4096;

/// A scope's validated share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSettings {
    /// Weight, at least 1.
    pub weight: u32,
    /// Guaranteed tokens per window (0: none).
    pub guarantee: u64,
    /// Ceiling in tokens per window (`None`: none).
    pub ceiling: Option<u64>,
    /// The window, in nanoseconds.
    pub window_ns: u64,
}

impl Default for ShareSettings {
    fn default() -> Self {
        ShareSettings { weight: 1, guarantee: 0, ceiling: None, window_ns: 60_000_000_000 }
    }
}

/// Validated classes (built-in ones overridden by the config) and shares
/// by configured path (templates keep their `*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WaitingSettings {
    /// Classes by name.
    pub classes: BTreeMap<String, ClassSettings>,
    /// Shares by configured path.
    pub shares: BTreeMap<String, ShareSettings>,
}

/// Validates the `classes` and `shares` tables.
pub fn compile(
    classes: &BTreeMap<String, ClassConfig>,
    shares: &BTreeMap<String, ShareConfig>,
) -> Result<WaitingSettings> {
    let mut settings = WaitingSettings::default();
    for (name, priority, queue_bound, max_wait) in DEFAULT_CLASSES {
        let max_wait_ns = crate::time::duration_ns(max_wait);
        settings
            .classes
            .insert(name.into(), ClassSettings { priority, queue_bound, max_wait_ns, quantum: DEFAULT_QUANTUM });
    }
    for (name, class) in classes {
        let base = settings.classes.get(name).cloned().unwrap_or(DEFAULT_CLASS);
        settings.classes.insert(name.clone(), compile_class(&format!("classes.{name}"), class, base)?);
    }
    for (path, share) in shares {
        settings.shares.insert(path.clone(), compile_share(&format!("shares.{path}"), path, share)?);
    }
    Ok(settings)
}

fn compile_class(field: &str, class: &ClassConfig, base: ClassSettings) -> Result<ClassSettings> {
    let queue_bound = class.queue_bound.unwrap_or(base.queue_bound);
    if queue_bound == 0 {
        return Err(Error::config(format!("{field}.queue_bound"), 0, "must be at least 1"));
    }
    let quantum = class.quantum.unwrap_or(base.quantum);
    if quantum == 0 || quantum > crate::MAX_TOKENS {
        return Err(Error::config(format!("{field}.quantum"), quantum, "must be in 1..=2^40 tokens"));
    }
    let max_wait_ns = match &class.max_wait {
        Some(text) => parse_duration(&format!("{field}.max_wait"), text)?,
        None => base.max_wait_ns,
    };
    Ok(ClassSettings { priority: class.priority.unwrap_or(base.priority), queue_bound, max_wait_ns, quantum })
}

fn compile_share(field: &str, path: &str, share: &ShareConfig) -> Result<ShareSettings> {
    if path.is_empty() || path.split('/').any(|s| s.is_empty() || (s.contains('*') && s != "*")) {
        return Err(Error::config(field, path, "a scope path needs non-empty segments; `*` only as a whole segment"));
    }
    let weight = share.weight.unwrap_or(1);
    if weight == 0 {
        return Err(Error::config(format!("{field}.weight"), 0, "must be at least 1"));
    }
    let window_ns = match &share.window {
        Some(text) => parse_duration(&format!("{field}.window"), text)?,
        None => ShareSettings::default().window_ns,
    };
    let guarantee = share.guarantee.unwrap_or(0);
    for (name, value) in [("guarantee", Some(guarantee)), ("ceiling", share.ceiling)] {
        if value.is_some_and(|v| v > crate::MAX_TOKENS) {
            return Err(Error::config(format!("{field}.{name}"), value.unwrap_or(0), "must be at most 2^40 tokens"));
        }
    }
    if let Some(ceiling) = share.ceiling {
        if ceiling == 0 || ceiling < guarantee {
            let reason = format!("must be at least 1 and at least the guarantee ({guarantee})");
            return Err(Error::config(format!("{field}.ceiling"), ceiling, reason));
        }
    }
    Ok(ShareSettings { weight, guarantee, ceiling: share.ceiling, window_ns })
}

fn parse_duration(field: &str, text: &str) -> Result<u64> {
    let d = humantime::parse_duration(text)
        .map_err(|e| Error::config(field, text, format!("not a duration ({e}); write e.g. 1s, 1m, 500ms")))?;
    match crate::time::duration_ns(d) {
        0 => Err(Error::config(field, text, "must be longer than zero")),
        ns => Ok(ns),
    }
}
