//! The simulator's goals, with the shipped scenarios and their fixed seeds:
//! with correct limits llmgov makes no provider 429 and finishes within 3%
//! of the lower bound; a run is deterministic; bad scenarios are reported
//! with file, field and value; the plot is a valid SVG.

use std::path::{Path, PathBuf};

use llmgov_cli::error::parse_toml;
use llmgov_cli::sim::{self, Report, Scenario, StrategyReport};

fn scenario_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"))
}

fn row<'a>(report: &'a Report, name: &str) -> &'a StrategyReport {
    report.strategies.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no {name} row in\n{report}"))
}

/// Runs a shipped scenario and checks llmgov's goals on it; the other
/// strategies' figures are printed beside it.
fn assert_goals(name: &str) -> Report {
    let report = sim::simulate_file(&scenario_path(name)).unwrap();
    println!("{report}");
    let llmgov = row(&report, "llmgov");
    assert_eq!(llmgov.provider_429s, 0, "{name}: llmgov drew provider 429s\n{report}");
    assert_eq!(llmgov.success_rate, 1.0, "{name}\n{report}");
    assert!(llmgov.bound_ratio <= 1.03, "{name}: makespan {:.4} x the bound\n{report}", llmgov.bound_ratio);
    assert!(llmgov.bound_ratio >= 1.0, "{name}: a lower bound was beaten, so it is wrong\n{report}");
    for s in &report.strategies {
        assert!(s.bound_ratio >= 1.0, "{name}: {} beat the lower bound\n{report}", s.name);
    }
    report
}

#[test]
fn seed_batch_is_token_bound_near_19_minutes_and_llmgov_meets_it() {
    let report = assert_goals("seed_batch");
    assert_eq!(report.bound.binding, "tokens/1m");
    let minutes = report.bound.seconds / 60.0;
    assert!((18.5..19.5).contains(&minutes), "bound {minutes} min");
    assert_eq!(report.strategies.len(), 4);
    let naive = row(&report, "fixed sleep 10s");
    assert!(naive.provider_429s > 1000 && naive.retry_amplification > 10.0, "{report}");
    assert_eq!(row(&report, "llmgov").retry_amplification, 1.0);
}

#[test]
fn mixed_short_and_long_prompts() {
    assert_goals("mixed_prompts");
}

#[test]
fn two_tenants_at_3_to_1() {
    let report = assert_goals("tenants_3_to_1");
    // Equal backlogs served first come, first served: equal tokens to
    // weights 3 and 1 is a Jain index of about 0.8.
    let jain = row(&report, "llmgov").jain_fairness.expect("requests were served");
    assert!((0.75..0.85).contains(&jain), "Jain {jain}");
}

#[test]
fn interactive_plus_batch_classes() {
    let report = assert_goals("interactive_plus_batch");
    let classes = &row(&report, "llmgov").classes;
    assert_eq!(classes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["batch", "interactive"]);
    assert_eq!(classes[1].deadline_s, Some(10.0));
}

#[test]
fn unknown_output_lengths() {
    assert_goals("unknown_output_lengths");
}

/// Against a provider that charges actual usage, reserving the learned p95
/// of the outputs (capped at max_tokens) finishes the backlog sooner than
/// reserving max_tokens, with no provider 429 either way.
#[test]
fn learned_output_reservation_beats_max_tokens_on_actual_charging() {
    let name = "unknown_outputs_actual_charging";
    let report = sim::simulate_file(&scenario_path(name)).unwrap();
    println!("{report}");
    let (max_tokens, learned) = (row(&report, "llmgov"), row(&report, "llmgov (learned output)"));
    for s in [max_tokens, learned] {
        assert_eq!(s.provider_429s, 0, "{name}: {} drew provider 429s\n{report}", s.name);
        assert_eq!(s.success_rate, 1.0, "{name}: {}\n{report}", s.name);
        assert_eq!(s.retry_amplification, 1.0, "{name}: {}\n{report}", s.name);
    }
    assert!(
        learned.makespan_s < 0.9 * max_tokens.makespan_s,
        "{name}: learned {:.1} s vs max_tokens {:.1} s\n{report}",
        learned.makespan_s,
        max_tokens.makespan_s
    );
    for s in &report.strategies {
        assert!(s.bound_ratio >= 1.0, "{name}: {} beat the lower bound\n{report}", s.name);
    }
}

#[test]
fn the_same_seed_gives_the_same_report_and_another_seed_another() {
    let text = std::fs::read_to_string(scenario_path("tenants_3_to_1")).unwrap();
    let scenario: Scenario = parse_toml(&text).unwrap();
    let first = sim::run(&scenario).unwrap();
    assert_eq!(first, sim::run(&scenario).unwrap());
    assert_eq!(first.to_string(), sim::run(&scenario).unwrap().to_string());
    let other = sim::run(&Scenario { seed: scenario.seed + 1, ..scenario }).unwrap();
    assert_ne!(first.strategies, other.strategies);
}

#[test]
fn the_demo_is_the_shipped_seed_batch_file() {
    let text = std::fs::read_to_string(scenario_path("seed_batch")).unwrap();
    assert_eq!(sim::demo_scenario(), parse_toml::<Scenario>(&text).unwrap());
}

#[test]
fn every_shipped_scenario_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            parse_toml::<Scenario>(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            count += 1;
        }
    }
    assert!(count >= 7, "{count} scenarios");
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llmgov-sim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the seed batch scenario with `from` replaced by `to`, and
/// simulates it.
fn simulate_edited(dir: &Path, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(scenario_path("seed_batch")).unwrap();
    assert!(text.contains(from), "{from}");
    let path = dir.join("bad.toml");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    sim::simulate_file(&path).unwrap_err().to_string()
}

#[test]
fn a_malformed_scenario_names_the_file_the_field_and_the_value() {
    let dir = temp_dir("malformed");
    let file = dir.join("bad.toml").display().to_string();
    for (from, to, field, value) in [
        ("max_tokens = 400", "max_tokens = \"lots\"", "workload.classes[0].max_tokens", "lots"),
        (
            "window = \"1m\" },\n  { dimension = \"tokens\"",
            "window = \"1 fortnight\" },\n  { dimension = \"tokens\"",
            "provider.limits[0].window",
            "1 fortnight",
        ),
        ("sleep = \"10s\"", "sleep = \"10s\"\npoll = \"2s\"", "strategies[0].poll", "2s"),
        ("cap = \"60s\"", "cap = \"-5s\"", "strategies[1].cap", "-5s"),
        ("p95 = 400 }", "p95 = 100 }", "workload.classes[0].output_tokens.p95", "100"),
        (
            "kind = \"all_at_once\"",
            "kind = \"all_at_once\", per_minute = 5.0",
            "workload.classes[0].arrival.per_minute",
            "= `5`",
        ),
    ] {
        let err = simulate_edited(&dir, from, to);
        assert!(err.contains(&file), "no file in: {err}");
        assert!(err.contains(field), "no field {field} in: {err}");
        assert!(err.contains(value), "no value {value} in: {err}");
    }
    let err = sim::simulate_file(&dir.join("missing.toml")).unwrap_err().to_string();
    assert!(err.contains("missing.toml"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reserve_applies_only_to_llmgov() {
    let dir = temp_dir("reserve");
    let err = simulate_edited(&dir, "sleep = \"10s\"", "sleep = \"10s\"\nreserve = \"learned\"");
    assert!(err.contains("strategies[0].reserve") && err.contains("`learned`"), "{err}");
    let err = simulate_edited(&dir, "kind = \"llmgov\"", "kind = \"llmgov\"\nreserve = \"p95\"");
    assert!(err.contains("reserve") && err.contains("p95"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn write_svg_writes_a_valid_svg_plot() {
    let text = std::fs::read_to_string(scenario_path("seed_batch")).unwrap();
    let mut scenario: Scenario = parse_toml(&text).unwrap();
    scenario.workload.classes[0].requests = 200;
    let report = sim::run(&scenario).unwrap();
    let dir = temp_dir("svg");
    let path = dir.join("plot.svg");
    sim::write_svg(&report, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}", &svg[..svg.len().min(200)]);
    for s in &report.strategies {
        assert!(svg.contains(&s.name), "no legend for {}", s.name);
    }
    assert!(svg.contains("limit per minute") && svg.contains("<polyline"));
    std::fs::remove_dir_all(dir).unwrap();
}
