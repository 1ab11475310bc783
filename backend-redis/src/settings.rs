//! The `[redis]` section of a config: where Redis is, the key prefix, which
//! scopes are shared and how, and the safe share when Redis is away.
//!
//! ```toml
//! [redis]
//! url = "redis://127.0.0.1:6379"   # rediss:// for TLS (feature `tls`); redis://:password@host for AUTH
//! cluster = false                  # true: url is any node of a Redis Cluster
//! # sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"]   # url = "redis://:password@<master name>/0"
//! prefix = "prod-eu"               # one namespace per deployment
//! expected_processes = 8           # the safe share is each limit ÷ this
//! slot_ttl = "10s"                 # a crashed worker's concurrency slots come back after this
//! timeout = "250ms"                # connect, read and write timeout of each Redis call
//! retry_interval = "1s"            # how often a degraded process tries Redis again
//! lease_ttl = "2s"                 # leased mode: a crashed process's lease returns after this
//! # tls_ca_file = "/etc/ssl/redis-ca.pem"   # rediss:// with a private CA (feature `tls`)
//!
//! [redis.scopes."openai/org-main/gpt-4o"]
//! mode = "exact"                   # or "leased"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::errors::{Error, Result};

/// How a shared scope is enforced across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Every acquire and every settle is one Lua script on Redis: nothing
    /// is ever admitted past the limit, at one round trip per call.
    Exact,
    /// Each process leases slices of every rate limit, sized from its recent
    /// demand, and admits from them locally without a round trip; unused
    /// slices go back, and a crashed process's lease returns after
    /// `lease_ttl`. Over-admission is bounded by the leases of processes
    /// that die (or stall past the TTL) holding them.
    Leased,
}

/// One shared scope's entry under `[redis.scopes]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedScopeConfig {
    /// How the scope is shared.
    pub mode: Mode,
}

/// The `[redis]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user][:password@]host:port[/db]`, or `rediss://` for TLS.
    /// Left out, it is read from `LLMGOV_REDIS_URL` when the governor is built.
    #[serde(default)]
    pub url: Option<String>,
    /// Whether `url` names one node of a Redis Cluster (the client learns
    /// the others from it) rather than the one server. Default false.
    #[serde(default)]
    pub cluster: bool,
    /// The Sentinels watching the server, each `redis[s]://[:password@]host:port`.
    /// `url`'s host is then the name of the master they monitor
    /// (`redis://:password@mymaster/0`), and each new connection goes to
    /// the master the first Sentinel to answer names. Default: none.
    #[serde(default)]
    pub sentinels: Vec<String>,
    /// Namespace of every key, one per deployment: `{llmgov:<prefix>:<scope>}`.
    pub prefix: String,
    /// How many processes share the limits: a process that cannot reach
    /// Redis admits at most each shared limit ÷ this.
    pub expected_processes: u32,
    /// Lifetime of a concurrency slot without a heartbeat. Default 10s.
    #[serde(default)]
    pub slot_ttl: Option<String>,
    /// Timeout of each connect, read and write. Default 250ms.
    #[serde(default)]
    pub timeout: Option<String>,
    /// How long a degraded process waits before trying Redis again. Default 1s.
    #[serde(default)]
    pub retry_interval: Option<String>,
    /// Lifetime of a lease (leased mode). Default 2s.
    #[serde(default)]
    pub lease_ttl: Option<String>,
    /// PEM file of the CA to trust for `rediss://` instead of the
    /// platform's roots (needs the `tls` feature).
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// The shared scopes by path; every other scope stays local.
    #[serde(default)]
    pub scopes: BTreeMap<String, SharedScopeConfig>,
}

/// The `[redis]` section, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Connection URL.
    pub url: String,
    /// Whether `url` is a node of a Redis Cluster.
    pub cluster: bool,
    /// The Sentinels to ask for the master `url` names, if any.
    pub sentinels: Vec<String>,
    /// Key namespace.
    pub prefix: String,
    /// The divisor of the safe share.
    pub expected_processes: u32,
    /// Concurrency slot lifetime without a heartbeat.
    pub slot_ttl: Duration,
    /// Per-call I/O timeout.
    pub timeout: Duration,
    /// Wait between reconnection attempts while degraded.
    pub retry_interval: Duration,
    /// Lease lifetime in leased mode.
    pub lease_ttl: Duration,
    /// The CA to trust for TLS, if not the platform's roots.
    pub tls_ca_file: Option<String>,
    /// Shared scopes by path.
    pub scopes: BTreeMap<String, Mode>,
}

impl Settings {
    /// Validates the section; `url_fallback` stands in for a missing `url`.
    pub fn compile(raw: RedisConfig, url_fallback: Option<String>) -> Result<Self> {
        let url = checked_url(raw.url.or(url_fallback), raw.tls_ca_file.as_deref())?;
        if raw.cluster && url.starts_with("unix://") {
            return Err(Error::config(
                "redis.url",
                redact(&url),
                "a Redis Cluster is reached over TCP: redis:// or rediss://",
            ));
        }
        check_sentinels(&raw.sentinels, raw.cluster, &url)?;
        let prefix_ok = !raw.prefix.is_empty()
            && raw.prefix.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !prefix_ok {
            return Err(Error::config(
                "redis.prefix",
                &raw.prefix,
                "must be non-empty letters, digits, '-', '_' or '.'",
            ));
        }
        if raw.expected_processes == 0 {
            return Err(Error::config("redis.expected_processes", 0, "must be at least 1"));
        }
        for path in raw.scopes.keys() {
            if path.contains(['{', '}', '*']) {
                return Err(Error::config(
                    format!("redis.scopes.{path}"),
                    path,
                    "a shared scope is a configured path without `*`, `{` or `}`",
                ));
            }
        }
        // The keeper refreshes slots and returns leases every third of a TTL:
        // below MIN_TTL it would call Redis in a tight loop.
        let ttl = |field, text: Option<&str>, default| duration(field, text, default, MIN_TTL);
        let millis = Duration::from_millis(1);
        Ok(Settings {
            url,
            cluster: raw.cluster,
            sentinels: raw.sentinels,
            prefix: raw.prefix,
            expected_processes: raw.expected_processes,
            slot_ttl: ttl("redis.slot_ttl", raw.slot_ttl.as_deref(), Duration::from_secs(10))?,
            timeout: duration("redis.timeout", raw.timeout.as_deref(), Duration::from_millis(250), millis)?,
            retry_interval: duration(
                "redis.retry_interval",
                raw.retry_interval.as_deref(),
                Duration::from_secs(1),
                millis,
            )?,
            tls_ca_file: raw.tls_ca_file,
            lease_ttl: ttl("redis.lease_ttl", raw.lease_ttl.as_deref(), Duration::from_secs(2))?,
            scopes: raw.scopes.into_iter().map(|(path, scope)| (path, scope.mode)).collect(),
        })
    }

    /// The fraction of each shared limit a process may use without Redis.
    pub fn safe_share(&self) -> f64 {
        1.0 / f64::from(self.expected_processes)
    }
}

/// The server's url (`url`, else `LLMGOV_REDIS_URL`), checked against the
/// TLS settings and what this build supports.
fn checked_url(url: Option<String>, tls_ca_file: Option<&str>) -> Result<String> {
    let url =
        url.ok_or_else(|| Error::config("redis.url", "", "missing: set it in the config or in LLMGOV_REDIS_URL"))?;
    if !(url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://")) {
        return Err(Error::config("redis.url", redact(&url), "must start with redis://, rediss:// or unix://"));
    }
    let tls = url.starts_with("rediss://") || tls_ca_file.is_some();
    if tls && !cfg!(feature = "tls") {
        return Err(Error::config("redis.url", redact(&url), "TLS needs llmgov-redis built with the `tls` feature"));
    }
    if let Some(path) = tls_ca_file {
        if !url.starts_with("rediss://") {
            return Err(Error::config("redis.tls_ca_file", path, "a CA file needs a rediss:// url (TLS)"));
        }
    }
    Ok(url)
}

/// With `sentinels`, `url` names the master (by the name the Sentinels
/// know it by), and each is a `redis://` or `rediss://` server.
fn check_sentinels(sentinels: &[String], cluster: bool, url: &str) -> Result<()> {
    if sentinels.is_empty() {
        return Ok(());
    }
    if cluster {
        return Err(Error::config(
            "redis.sentinels",
            sentinels.iter().map(|s| redact(s)).collect::<Vec<_>>().join(", "),
            "a Redis Cluster is found through its nodes, not Sentinel: set `cluster` or `sentinels`, not both",
        ));
    }
    let over_tcp = |url: &str| url.starts_with("redis://") || url.starts_with("rediss://");
    if !over_tcp(url) {
        return Err(Error::config(
            "redis.url",
            redact(url),
            "with `sentinels`, the url is redis[s]://[user:password@]<master name>[/db]",
        ));
    }
    for (i, sentinel) in sentinels.iter().enumerate() {
        if !over_tcp(sentinel) {
            return Err(Error::config(
                format!("redis.sentinels[{i}]"),
                redact(sentinel),
                "a Sentinel is reached at redis[s]://[:password@]host:port",
            ));
        }
    }
    Ok(())
}

/// The shortest slot or lease TTL.
const MIN_TTL: Duration = Duration::from_millis(100);
/// The longest duration of the section: longer ones are typos (`1000y`)
/// that would overflow the nanosecond clock arithmetic.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

fn duration(field: &str, text: Option<&str>, default: Duration, min: Duration) -> Result<Duration> {
    let Some(text) = text else { return Ok(default) };
    match humantime::parse_duration(text) {
        Ok(d) if d < min => {
            Err(Error::config(field, text, format!("must be at least {}", humantime::format_duration(min))))
        }
        Ok(d) if d > MAX_DURATION => Err(Error::config(field, text, "must be at most 1day")),
        Ok(d) => Ok(d),
        Err(e) => Err(Error::config(field, text, format!("not a duration ({e}); write e.g. 250ms, 1s, 10s"))),
    }
}

/// A URL fit for an error message: the password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}***{}", &url[..scheme + 3], &url[at..]),
        _ => url.to_owned(),
    }
}
