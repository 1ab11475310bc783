//! Bad input given to the `llmgov` binary, as a careless user would give it:
//! each must end in a clear error naming the field (or flag) and the value,
//! with a non-zero exit status, never a panic, an abort or a run that never
//! ends.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The shipped seed batch scenario, as text to break.
fn seed_batch() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/seed_batch.toml");
    std::fs::read_to_string(path).expect("the shipped scenario reads")
}

/// Runs `llmgov args`.
fn llmgov(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llmgov")).args(args).output().expect("the binary runs")
}

/// Runs `llmgov simulate` on `text`, written to a file named after `name`.
fn simulate(name: &str, text: &str) -> Output {
    let path = std::env::temp_dir().join(format!("llmgov-bad-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).expect("the temp dir is writable");
    let output = llmgov(&["simulate", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    output
}

/// The seed batch with `from` replaced by `to` (which must be there).
fn seed_batch_with(from: &str, to: &str) -> String {
    let text = seed_batch();
    assert!(text.contains(from), "{from:?} is not in seed_batch.toml");
    text.replacen(from, to, 1)
}

/// Asserts that `output` is a clean failure whose message names each of `needles`.
#[track_caller]
fn assert_refused(output: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "exit status {} for {stderr}", output.status);
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
    assert!(stderr.starts_with("llmgov: error: "), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} missing from {stderr}");
    }
}

#[test]
fn latencies_that_are_negative_infinite_nan_or_absurd_are_refused_by_name() {
    let latency = "latency = { ttft_ms = 400, ms_per_output_token = 15 }";
    for (broken, field, shown) in [
        ("latency = { ttft_ms = -400, ms_per_output_token = 15 }", "ttft_ms", "`-400`"),
        ("latency = { ttft_ms = inf, ms_per_output_token = 15 }", "ttft_ms", "`inf`"),
        ("latency = { ttft_ms = nan, ms_per_output_token = 15 }", "ttft_ms", "`NaN`"),
        ("latency = { ttft_ms = 1e300, ms_per_output_token = 15 }", "ttft_ms", "`1e300`"),
        ("latency = { ttft_ms = 400, ms_per_output_token = -15 }", "ms_per_output_token", "`-15`"),
        ("latency = { ttft_ms = 400, ms_per_output_token = 15, spike_ms = -1 }", "spike_ms", "`-1`"),
    ] {
        let output = simulate(&format!("latency-{field}"), &seed_batch_with(latency, broken));
        assert_refused(&output, &[&format!("`provider.latency.{field}` = {shown}")]);
    }
}

#[test]
fn a_bad_spike_probability_is_named_under_latency() {
    let output = simulate(
        "spike",
        &seed_batch_with("ms_per_output_token = 15 }", "ms_per_output_token = 15, spike_probability = 2 }"),
    );
    assert_refused(&output, &["`provider.latency.spike_probability` = `2`"]);
}

#[test]
fn more_requests_than_the_simulator_holds_are_refused_not_aborted() {
    let output = simulate("requests", &seed_batch_with("requests = 1000", "requests = 100000000000"));
    assert_refused(&output, &["`workload.classes[0].requests` = `100000000000`", "at most 1000000"]);
}

#[test]
fn token_sizes_beyond_the_cores_bound_are_refused_by_name() {
    let output = simulate("median", &seed_batch_with("median = 1950, p95 = 2850", "median = 1e300, p95 = 1e301"));
    assert_refused(&output, &["`workload.classes[0].input_tokens.median` = `1e300`"]);
    let output = simulate("max-tokens", &seed_batch_with("max_tokens = 400", "max_tokens = 9000000000000000000"));
    assert_refused(&output, &["`workload.classes[0].max_tokens` = `9000000000000000000`"]);
}

/// Prompts larger than the provider's token limit could never be admitted:
/// the run used to retry them until a week of virtual time had passed (or
/// report 0% served beside a meaningless bound).
#[test]
fn requests_that_never_fit_the_provider_are_refused_up_front() {
    let text = seed_batch_with("median = 1950, p95 = 2850, max = 8000", "median = 150000").replacen(
        "requests = 1000",
        "requests = 5",
        1,
    );
    let llmgov_only = text.split("[[strategies]]").next().unwrap().to_owned() + "[[strategies]]\nkind = \"llmgov\"\n";
    let output = simulate("never-fits", &llmgov_only);
    assert_refused(&output, &["`workload.classes[0]`", "150000 input tokens", "holds 100000 per 1m"]);
}

/// A prompt of so many characters that its estimate passes the core's bound
/// was refused as the core's `input_tokens`, a field no scenario has.
#[test]
fn a_prompt_too_large_to_estimate_names_the_scenario_field() {
    let text = seed_batch_with("max_tokens = 400", "max_tokens = 400\nchars_per_token = 1e12")
        .replacen("requests = 1000", "requests = 3", 1)
        .replacen("amount = 100000,", "amount = 9007199254740992,", 1);
    let output = simulate("huge-prompt", &text);
    assert_refused(&output, &["`workload.classes[0].chars_per_token` = `1000000000000`"]);
}

/// `--rpm -1` used to be taken for an unknown flag `-1` ("unexpected
/// argument '-1' found"), which names neither the flag nor the problem.
#[test]
fn negative_plan_numbers_are_refused_naming_the_flag() {
    for flag in
        ["--rpm", "--tpm", "--input-tpm", "--output-tpm", "--concurrency", "--p95-input", "--p95-output", "--latency"]
    {
        let limit = if flag == "--tpm" { "--rpm" } else { "--tpm" };
        let output = llmgov(&["plan", "--avg-input", "100", "--avg-output", "50", limit, "6000", flag, "-5"]);
        // A latency of 0 is taken without a concurrency limit, so -5 is "non-negative"'s.
        let reason = if flag == "--latency" { "must be a non-negative number" } else { "must be a positive number" };
        assert_refused(&output, &[&format!("`{flag}` = `-5`"), reason]);
    }
    let output = llmgov(&["plan", "--avg-input", "-1.5", "--avg-output", "50", "--rpm", "60"]);
    assert_refused(&output, &["`--avg-input` = `-1.5`", "must be a non-negative number"]);
    let output = llmgov(&["plan", "--avg-input", "100", "--avg-output", "-1.5", "--rpm", "60"]);
    assert_refused(&output, &["`--avg-output` = `-1.5`", "must be a non-negative number"]);
    let output = llmgov(&["plan", "--avg-input", "100", "--avg-output", "50", "--rpm", "60", "--utilisation", "-0.5"]);
    assert_refused(&output, &["`--utilisation` = `-0.5`"]);
}

/// An empty file used to say "`.` = `name`: missing field `name`", and an
/// integer past TOML's range "`<toml>` = `18446744073709551615`".
#[test]
fn empty_files_missing_fields_and_out_of_range_integers_name_the_field() {
    assert_refused(&simulate("empty", ""), &["`name` = ``: is required"]);
    let output = simulate("no-max-tokens", &seed_batch_with("max_tokens = 400", ""));
    assert_refused(&output, &["`workload.classes[0].max_tokens` = ``: is required"]);
    let output = simulate("u64-max", &seed_batch_with("amount = 60,", "amount = 18446744073709551615,"));
    assert_refused(&output, &["`amount (line 11)` = `18446744073709551615`"]);
}

/// The plot's error named neither the flag nor the path: "plot: backend
/// error: Drawing backend error: No such file or directory (os error 2)".
#[test]
fn an_unwritable_plot_path_is_named_with_its_flag() {
    let scenario = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/tenants_3_to_1.toml");
    let output = llmgov(&["simulate", scenario.to_str().unwrap(), "--svg", "/nonexistent-dir/plot.svg"]);
    assert_refused(&output, &["`--svg` = `/nonexistent-dir/plot.svg`: could not write the plot", "No such file"]);
}

/// A factor of 1e300 was reported by the core as
/// "`scopes.provider.limits[0].amount` = `18446744073709551615`", a field of
/// a config the user never wrote; 1e-300 ran, labelled with 300 zeros.
#[test]
fn a_limits_factor_out_of_range_is_named_in_the_scenario() {
    for factor in ["1e300", "1e-300"] {
        let output = simulate(
            "factor",
            &seed_batch_with("kind = \"llmgov\"", &format!("kind = \"llmgov\"\nlimits_factor = {factor}")),
        );
        assert_refused(&output, &[&format!("`strategies[3].limits_factor` = `{factor}`: must be in [0.001, 1000]")]);
    }
}

/// Chaos fractions adding up past 1 gave no error and other fractions than
/// written (0.7 + 0.7: 30% of 529s instead of 70%).
#[test]
fn chaos_fractions_adding_up_past_one_are_refused() {
    let output = simulate(
        "chaos",
        &seed_batch_with("\n[workload]", "chaos = { error_500 = 0.7, error_529 = 0.7 }\n\n[workload]"),
    );
    assert_refused(&output, &["`provider.chaos` = `1.4`", "at most 1"]);
}

/// Arrivals past the week a run may last were blamed on the first strategy:
/// "`strategies` = `fixed sleep 10s`: did not finish within a week".
#[test]
fn arrivals_past_the_simulated_week_are_named_in_the_workload() {
    for arrival in [
        "kind = \"all_at_once\", start = \"8days\"",
        "kind = \"poisson\", per_minute = 0.0001",
        "kind = \"bursts\", size = 1, every = \"1h\"",
    ] {
        let output = simulate("late", &seed_batch_with("kind = \"all_at_once\"", arrival));
        assert_refused(&output, &["`workload.classes[0].arrival`", "past the week of virtual time"]);
    }
}

/// A field of another arrival kind showed the kind as its value:
/// "`arrival.per_minute` = `all_at_once`: does not apply to this kind".
#[test]
fn an_arrival_field_of_another_kind_shows_its_own_value() {
    let output =
        simulate("per-minute", &seed_batch_with("kind = \"all_at_once\"", "kind = \"all_at_once\", per_minute = 3"));
    assert_refused(&output, &["`workload.classes[0].arrival.per_minute` = `3`: does not apply to kind all_at_once"]);
    let output = simulate("no-every", &seed_batch_with("kind = \"all_at_once\"", "kind = \"bursts\", size = 5"));
    assert_refused(&output, &["`workload.classes[0].arrival.every` = ``: is required for kind bursts"]);
}

/// Two classes of one name ran: the report showed two rows of one name,
/// and llmgov's scheduler, keying its queues by name, held the batch
/// class's requests to the interactive one's 10 s deadline: 461 of its 500
/// were given up.
#[test]
fn two_classes_of_one_name_are_refused() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/fair_interactive_plus_batch.toml");
    let text = std::fs::read_to_string(path).unwrap().replace("name = \"interactive\"", "name = \"batch\"");
    let output = simulate("duplicate-class", &text);
    assert_refused(&output, &["`workload.classes[1].name` = `batch`: names another class already"]);
}

/// A provider refusing every request, retried every few ms, ran on for
/// hours of real time towards the week of virtual time a run may last.
#[test]
fn a_run_where_every_answer_is_a_refusal_stops_by_attempts() {
    let text = seed_batch_with("\n[workload]", "chaos = { error_500 = 1.0 }\n\n[workload]")
        .replacen("seed = 42", "seed = 42\nnetwork_delay = \"1ms\"", 1)
        .replacen("requests = 1000", "requests = 5", 1)
        .replacen("sleep = \"10s\"", "sleep = \"1ms\"", 1);
    let output = simulate("all-refused", &text);
    assert_refused(&output, &["`strategies` = `fixed sleep 1ms`: sent more than 10000 attempts per request"]);
}

/// Tenant names are scope path segments (`tenants/NAME`): "a/b" ran with
/// the fair scheduler's shares silently missed (Jain 0.778 for 0.983), ""
/// was refused by the core naming `tenants/`, a field nobody wrote; a weight
/// of 1e-300 printed a fairness index of NaN.
#[test]
fn tenant_names_and_weights_are_checked_in_the_scenario() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/fair_tenants_3_to_1.toml");
    let text = std::fs::read_to_string(path).unwrap();
    for (name, shown) in [("a/b", "a/b"), ("", ""), ("a\\u0000b", "a\\0b")] {
        let output = simulate("tenant-name", &text.replace("name = \"gold\"", &format!("name = \"{name}\"")));
        assert_refused(&output, &[&format!("`workload.tenants[0].name` = `{shown}`: must be a non-empty name")]);
    }
    let output = simulate("tenant-weight", &text.replace("weight = 3", "weight = 1e-300"));
    assert_refused(&output, &["`workload.tenants[0].weight` = `1e-300`: must be in [0.001, 1000]"]);
}

/// `--port -1` and `--every -1s` were taken for an unknown flag `-1`.
#[test]
fn negative_port_and_period_are_refused_naming_the_flag() {
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mock/test.toml");
    let output = llmgov(&["mock-server", "--config", config.to_str().unwrap(), "--port", "-1"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid value '-1' for '--port <PORT>'"), "{stderr}");
    let output = llmgov(&["top", "metrics.json", "--every", "-1s"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid value '-1s' for '--every <EVERY>'"), "{stderr}");
}
