//! The `llmgov` binary as a user runs it: demo, simulate and plan.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn llmgov(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_llmgov")).args(args).output().expect("the binary runs");
    assert!(output.status.success(), "llmgov {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    output
}

fn scenario(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
    path.to_string_lossy().into_owned()
}

#[test]
fn demo_prints_the_table_beside_the_bound_and_writes_the_plot() {
    let svg = std::env::temp_dir().join(format!("llmgov-demo-{}.svg", std::process::id()));
    let output = llmgov(&["demo", "--svg", svg.to_str().unwrap()]);
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("lower bound 19m"), "{table}");
    for strategy in ["fixed sleep", "backoff+jitter", "seed RPM+TPM limiter", "llmgov"] {
        assert!(table.contains(strategy), "{strategy} missing from\n{table}");
    }
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("tokens admitted"), "not the plot: {}", &plot[..80]);
    std::fs::remove_file(svg).unwrap();
}

#[test]
fn simulate_prints_json_for_a_scenario_file() {
    let output = llmgov(&["simulate", &scenario("tenants_3_to_1"), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["scenario"], "tenants_3_to_1");
    assert!(report["bound"]["seconds"].as_f64().unwrap() > 0.0);
    let names: Vec<&str> =
        report["strategies"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fixed sleep 10s", "backoff+jitter 1s..1m", "seed RPM+TPM limiter", "llmgov"]);
}

#[test]
fn plan_names_the_binding_limit() {
    let output = llmgov(&["plan", "--rpm", "60", "--tpm", "100000", "--avg-input", "1500", "--avg-output", "500"]);
    let plan = String::from_utf8(output.stdout).unwrap();
    assert!(plan.contains("sustainable: 45.0 requests/min (tpm binds)"), "{plan}");
}

#[test]
fn a_missing_scenario_file_is_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_llmgov")).args(["simulate", "no/such.toml"]).output().unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("no/such.toml"), "{err}");
}

/// Runs `llmgov args` with its standard output a pipe whose reader goes
/// away at once, as in `llmgov simulate … --json | head` once head exits.
/// (The reader is dropped as soon as the child runs, long before it has
/// parsed its arguments, let alone computed what it prints.)
fn llmgov_into_a_closed_pipe(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmgov"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    drop(child.stdout.take());
    child.wait_with_output().expect("it exits")
}

#[test]
fn a_reader_that_goes_away_ends_each_printing_command_quietly() {
    let metrics = std::env::temp_dir().join(format!("llmgov-top-epipe-{}.json", std::process::id()));
    let gov = llmgov::Governor::from_toml(
        r#"[scopes.p]
        limits = [{ dimension = "requests", amount = 60, window = "1m" }]"#,
    )
    .unwrap();
    std::fs::write(&metrics, serde_json::to_string(&gov.metrics()).unwrap()).unwrap();
    let svg = std::env::temp_dir().join(format!("llmgov-epipe-{}.svg", std::process::id()));
    let fair = scenario("fair_tenants_3_to_1");
    let commands: [&[&str]; 5] = [
        &["simulate", &fair, "--json", "--svg", svg.to_str().unwrap()],
        &["simulate", &fair],
        &["plan", "--rpm", "60", "--tpm", "100000", "--avg-input", "1500", "--avg-output", "500"],
        &["plan", "--rpm", "60", "--avg-input", "1500", "--avg-output", "500", "--json"],
        &["top", metrics.to_str().unwrap(), "--once"],
    ];
    for args in commands {
        let output = llmgov_into_a_closed_pipe(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "llmgov {args:?}: {stderr}");
        assert!(output.status.success(), "llmgov {args:?} exited with {}: {stderr}", output.status);
    }
    // The plot asked for is still written when nobody reads the report.
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_file(svg).unwrap();
    std::fs::remove_file(metrics).unwrap();
}

/// A provider refusing everything for billing serves nobody: Jain's index
/// is then 0 ÷ 0, and the table said 1.000, "perfectly fair".
#[test]
fn a_run_that_serves_nobody_has_no_fairness_index() {
    let text = std::fs::read_to_string(scenario("seed_batch")).unwrap();
    let broke = text
        .replacen(
            "latency = { ttft_ms = 400, ms_per_output_token = 15 }",
            "latency = { ttft_ms = 400, ms_per_output_token = 15 }\nchaos = { quota_exhausted = true }",
            1,
        )
        .replacen("requests = 1000", "requests = 5", 1);
    let path = std::env::temp_dir().join(format!("llmgov-broke-{}.toml", std::process::id()));
    std::fs::write(&path, broke).unwrap();
    let table = String::from_utf8(llmgov(&["simulate", path.to_str().unwrap()]).stdout).unwrap();
    let json = llmgov(&["simulate", path.to_str().unwrap(), "--json"]).stdout;
    std::fs::remove_file(&path).unwrap();
    let fixed_sleep = table.lines().find(|l| l.starts_with("fixed sleep")).expect("a fixed sleep row");
    assert!(fixed_sleep.contains("0.0%") && fixed_sleep.ends_with(" -"), "{fixed_sleep}");
    let report: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert!(report["strategies"].as_array().unwrap().iter().all(|s| s["jain_fairness"].is_null()), "{report}");
}
