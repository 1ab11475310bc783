//! The `llmgov` binary as a user runs it: demo, simulate and plan.

use std::path::PathBuf;
use std::process::{Command, Output};

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
