//! Replays the language-neutral conformance scenarios in `tests/scenarios/`
//! (format: `tests/scenarios/README.md`) against the Rust core. Every binding
//! replays the same files; this runner is the reference reading of them.
//!
//! Each step is read twice: into a typed [`Step`], which rejects unknown ops,
//! unknown fields and wrong types (so a typo cannot silently skip a check),
//! and as raw JSON, whose stated fields are compared with the actual values.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use llmgov::{ceil_ms, Config, Dimension, Error, Governor, ManualClock, Permit, Request, Usage};
use serde::Deserialize;
use serde_json::{json, Value};

/// The bindings are promised at least this many; fewer means files went missing.
const MIN_SCENARIOS: usize = 15;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    name: String,
    description: String,
    config: Value,
    /// Kept raw to compare against and to quote exactly in failures.
    steps: Vec<Value>,
}

/// The schema of a step. Missing `Option` fields read as `None`, missing
/// token counts as 0. Fields not read here are compared from the raw JSON.
#[derive(Deserialize)]
#[allow(dead_code)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[rustfmt::skip] // Laid out as a table of the format.
enum Step {
    Advance { ms: u64 },
    Acquire {
        permit: Option<String>,
        paths: Vec<String>,
        #[serde(default)] input_tokens: u64,
        #[serde(default)] cached_input_tokens: u64,
        #[serde(default)] max_output_tokens: u64,
        expected_output_tokens: Option<u64>,
        expect: Expect,
    },
    Settle {
        permit: String,
        #[serde(default)] input_tokens: u64,
        #[serde(default)] cached_input_tokens: u64,
        #[serde(default)] output_tokens: u64,
        expect: Option<Expect>,
    },
    Cancel { permit: String, expect: Option<Expect> },
    AddOutput { permit: String, tokens: u64, expect: Option<Expect> },
    ExpectLimit {
        scope: String, dimension: Dimension, limit: Option<usize>,
        available: Option<i64>, in_use: Option<u64>, reserved: Option<u64>, used: Option<u64>,
        expired: Option<u64>,
    },
    ExpectCounters {
        admitted: Option<u64>, rate_limited: Option<u64>, never_fits: Option<u64>, expired_permits: Option<u64>,
    },
}

/// The schema of an `expect`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Expect {
    outcome: String,
    code: Option<String>,
    scope: Option<String>,
    dimension: Option<Dimension>,
    retry_after_ms: Option<u64>,
}

/// A call's result in the scenario vocabulary; `success` names an `Ok`.
fn outcome<T>(result: &Result<T, Error>, success: &str) -> Value {
    match result {
        Ok(_) => json!({ "outcome": success }),
        Err(Error::RateLimited { scope, dimension, retry_after, .. }) => json!({
            "outcome": "rate_limited",
            "scope": &**scope,
            "dimension": dimension.as_str(),
            // Rounded up, so that waiting that long always suffices; null
            // (None) when the wait is for a release, not for time.
            "retry_after_ms": retry_after.map(ceil_ms),
        }),
        Err(Error::NeverFits { scope, dimension, .. }) => {
            json!({ "outcome": "never_fits", "scope": &**scope, "dimension": dimension.as_str() })
        }
        Err(e) => json!({ "outcome": "error", "code": e.code() }),
    }
}

/// Checks that every field `expected` states, bar the `selectors` that only
/// say what to look at, equals the same field of `actual`.
fn covers(expected: &Value, actual: &Value, selectors: &[&str]) -> Result<(), String> {
    let mut stated = expected.as_object().expect("steps and expects are JSON objects").clone();
    stated.retain(|k, _| !selectors.contains(&k.as_str()));
    match stated.iter().all(|(k, v)| actual.get(k) == Some(v)) {
        true => Ok(()),
        false => Err(format!("expected {}, got {actual}", Value::Object(stated))),
    }
}

/// One scenario's world: its own clock at 0, governor and named permits.
struct Run {
    clock: Arc<ManualClock>,
    gov: Governor,
    permits: HashMap<String, Permit>,
}

impl Run {
    fn new(config: Value) -> Result<Self, String> {
        let config = Config::from_value(config).map_err(|e| format!("config: {e}"))?;
        let clock = Arc::new(ManualClock::new(0));
        let gov = Governor::with_clock(&config, clock.clone()).map_err(|e| format!("config: {e}"))?;
        Ok(Run { clock, gov, permits: HashMap::new() })
    }

    fn step(&mut self, step: Step, raw: &Value) -> Result<(), String> {
        let expected = raw.get("expect").cloned().unwrap_or_else(|| json!({ "outcome": "ok" }));
        match step {
            Step::Advance { ms } => {
                self.clock.advance(Duration::from_millis(ms));
                Ok(())
            }
            Step::Acquire {
                permit,
                paths,
                input_tokens,
                cached_input_tokens,
                max_output_tokens,
                expected_output_tokens,
                ..
            } => {
                let estimate = Usage::new(input_tokens, max_output_tokens).with_cached_input(cached_input_tokens);
                covers(&expected, &self.acquire(permit, &paths, estimate, expected_output_tokens)?, &[])
            }
            Step::Settle { permit, input_tokens, cached_input_tokens, output_tokens, .. } => {
                let usage = Usage::new(input_tokens, output_tokens).with_cached_input(cached_input_tokens);
                let permit = named(&mut self.permits, &permit)?;
                covers(&expected, &outcome(&self.gov.settle(permit, usage), "ok"), &[])
            }
            Step::Cancel { permit, .. } => {
                let permit = named(&mut self.permits, &permit)?;
                covers(&expected, &outcome(&self.gov.cancel(permit), "ok"), &[])
            }
            Step::AddOutput { permit, tokens, .. } => {
                let permit = named(&mut self.permits, &permit)?;
                covers(&expected, &outcome(&self.gov.add_output(permit, tokens), "ok"), &[])
            }
            Step::ExpectLimit { scope, dimension, limit, .. } => {
                covers(raw, &self.limit(&scope, dimension, limit)?, &["op", "scope", "dimension", "limit"])
            }
            Step::ExpectCounters { .. } => {
                let s = self.gov.snapshot();
                let actual = json!({
                    "admitted": s.admitted,
                    "rate_limited": s.rate_limited,
                    "never_fits": s.never_fits,
                    "expired_permits": s.expired_permits,
                });
                covers(raw, &actual, &["op"])
            }
        }
    }

    /// Routes and reserves; a bad path is an outcome of the acquire, like a refusal.
    fn acquire(
        &mut self,
        name: Option<String>,
        paths: &[String],
        estimate: Usage,
        expected_output: Option<u64>,
    ) -> Result<Value, String> {
        if let Some(name) = name.as_ref().filter(|n| self.permits.contains_key(*n)) {
            return Err(format!("permit name `{name}` is used twice in this scenario"));
        }
        let result = self.gov.route(paths).and_then(|route| {
            let mut request = Request::new(route)
                .input_tokens(estimate.input_tokens)
                .cached_input_tokens(estimate.cached_input_tokens)
                .max_output_tokens(estimate.output_tokens);
            request.expected_output_tokens = expected_output;
            self.gov.try_acquire(&request)
        });
        let actual = outcome(&result, "admitted");
        if let (Ok(permit), Some(name)) = (result, name) {
            self.permits.insert(name, permit);
        }
        Ok(actual)
    }

    /// The actual values of the limit a step picks, from a snapshot (which,
    /// unlike `scope_id`, never instantiates a template scope).
    fn limit(&self, path: &str, dimension: Dimension, index: Option<usize>) -> Result<Value, String> {
        let snapshot = self.gov.snapshot();
        let scope = snapshot.scopes.iter().find(|s| s.path == path).ok_or_else(|| {
            let known: Vec<_> = snapshot.scopes.iter().map(|s| s.path.as_str()).collect();
            format!("no scope `{path}` instantiated; known: {known:?}")
        })?;
        let limit = match index {
            Some(i) => scope.limits.get(i).filter(|l| l.dimension == dimension),
            None => scope.limit(dimension),
        }
        .ok_or_else(|| format!("scope `{path}` has no {dimension} limit at {index:?}"))?;
        // `expired` is absent from the JSON of limits other than concurrency.
        Ok(json!(limit))
    }
}

/// A named permit (a free function, so the governor stays borrowable beside it).
fn named<'a>(permits: &'a mut HashMap<String, Permit>, name: &str) -> Result<&'a mut Permit, String> {
    permits.get_mut(name).ok_or_else(|| format!("no admitted permit named `{name}`"))
}

/// Rules the schema cannot express; breaking them is a bug in the file.
fn check_form(step: &Step) -> Result<(), String> {
    let expect = match step {
        Step::Acquire { permit: None, expect, .. } if expect.outcome == "admitted" => {
            return Err("an acquire expected to be admitted must name its permit".into())
        }
        Step::Acquire { expect, .. } => Some(expect),
        Step::Settle { expect, .. } | Step::Cancel { expect, .. } | Step::AddOutput { expect, .. } => expect.as_ref(),
        _ => None,
    };
    match expect {
        Some(e) if e.outcome == "error" && e.code.is_none() => Err("an expected error must give its code".into()),
        _ => Ok(()),
    }
}

/// Replays one file; returns its step count, or the first failure (later
/// steps depend on the state an earlier failure left wrong).
fn replay(file: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
    let scenario: Scenario = serde_json::from_str(&text).map_err(|e| format!("not a scenario: {e}"))?;
    if file.file_stem().and_then(|s| s.to_str()) != Some(scenario.name.as_str()) {
        return Err(format!("name `{}` differs from the file name", scenario.name));
    }
    if scenario.description.trim().is_empty() {
        return Err("description is empty".into());
    }
    let mut run = Run::new(scenario.config)?;
    for (i, raw) in scenario.steps.iter().enumerate() {
        let fail = |msg: String| format!("steps[{i}] {raw}: {msg}");
        let step: Step = serde_json::from_value(raw.clone()).map_err(|e| fail(format!("malformed step: {e}")))?;
        check_form(&step).map_err(fail)?;
        run.step(step, raw).map_err(fail)?;
    }
    Ok(scenario.steps.len())
}

fn scenario_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Replays every file and reports every failing one, not just the first.
#[test]
fn conformance_scenarios() {
    let files = scenario_files();
    let (mut failures, mut steps) = (Vec::new(), 0);
    for file in &files {
        let shown = format!("tests/scenarios/{}", file.file_name().unwrap().to_string_lossy());
        let result = replay(file);
        println!("{} {shown}", if result.is_ok() { "ok  " } else { "FAIL" });
        match result {
            Ok(n) => steps += n,
            Err(e) => failures.push(format!("{shown}: {e}")),
        }
    }
    if files.len() < MIN_SCENARIOS {
        failures.push(format!("found {} scenario files, expected at least {MIN_SCENARIOS}", files.len()));
    }
    println!("replayed {} scenarios ({steps} steps), {} failed", files.len(), failures.len());
    assert!(failures.is_empty(), "scenario conformance failed:\n{}", failures.join("\n"));
}
