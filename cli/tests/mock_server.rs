//! Drives `llmgov mock-server` as a subprocess with a real HTTP client, as
//! the language bindings' tests do: both API shapes, plain and streamed,
//! their 429s with headers, and malformed requests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

/// Fast answers (a few ms) and output lengths the tests can check.
const FAST: &str = r#"
[server]
seed = 3
output_tokens = { min = 3, max = 12 }
"#;

const LATENCY: &str = "latency = { ttft_ms = 2, ms_per_output_token = 0.2 }\n";

/// A running mock server, killed when dropped.
struct MockServer {
    child: Child,
    base: String,
    config: PathBuf,
}

impl MockServer {
    /// Starts the server on a free port with `toml` as its config.
    fn start(name: &str, toml: &str) -> Self {
        let config = write_config(name, toml);
        let (child, base) = spawn(&config);
        MockServer { child, base, config }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn openai(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/v1/chat/completions"))
            .bearer_auth("sk-test")
            .json(body)
            .send()
            .await
            .expect("the server answers")
    }

    async fn anthropic(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/v1/messages"))
            .header("x-api-key", "sk-ant-test")
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .expect("the server answers")
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Starts the binary on `config` and reads the address it prints.
fn spawn(config: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmgov"))
        .args(["mock-server", "--config"])
        .arg(config)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the llmgov binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout is piped")).read_line(&mut line).expect("stdout reads");
    let Some(base) = line.trim().strip_prefix("llmgov mock-server listening on ").map(str::to_owned) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no address line from the server (see its stderr above): {line:?}");
    };
    assert!(base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"), "{base}");
    (child, base)
}

fn write_config(name: &str, toml: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("llmgov-mock-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, toml).expect("the temp dir is writable");
    path
}

/// Runs `llmgov mock-server` on a config it should refuse at load, until
/// it exits; its output, and the config's path (removed by then).
fn refused_config(name: &str, toml: &str) -> (std::process::Output, PathBuf) {
    let config = write_config(name, toml);
    let output = Command::new(env!("CARGO_BIN_EXE_llmgov"))
        .args(["mock-server", "--config"])
        .arg(&config)
        .output()
        .expect("the llmgov binary starts");
    let _ = std::fs::remove_file(&config);
    (output, config)
}

fn openai_config(limits: &str) -> String {
    format!("{FAST}\n[openai]\nshape = \"openai\"\nlimits = [{limits}]\n{LATENCY}")
}

fn anthropic_config(limits: &str) -> String {
    format!("{FAST}\n[anthropic]\nshape = \"anthropic\"\nlimits = [{limits}]\n{LATENCY}")
}

fn chat(stream: bool) -> Value {
    json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Say hello to the mock server."}],
        "max_tokens": 50,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

fn message(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet",
        "max_tokens": 50,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello to the mock server."}]}],
        "stream": stream,
    })
}

fn header(response: &reqwest::Response, name: &str) -> String {
    let value = response.headers().get(name).unwrap_or_else(|| panic!("no {name} header"));
    value.to_str().expect("ASCII header").to_owned()
}

/// The `data:` payloads of a stream, and each block's event name.
fn sse(text: &str) -> Vec<(Option<String>, String)> {
    let blocks = text.split("\n\n").filter(|b| !b.trim().is_empty());
    blocks
        .map(|block| {
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned());
            (field("event:"), field("data:").expect("every event has data"))
        })
        .collect()
}

#[tokio::test]
async fn openai_answers_with_usage_and_rate_limit_headers() {
    let server = MockServer::start(
        "openai-plain",
        &openai_config(
            r#"{ dimension = "requests", amount = 100, window = "1m" },
        { dimension = "tokens", amount = 10000, window = "1m" }"#,
        ),
    );
    let response = server.openai(&chat(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-ratelimit-limit-requests"), "100");
    assert_eq!(header(&response, "x-ratelimit-remaining-requests"), "99");
    assert_eq!(header(&response, "x-ratelimit-limit-tokens"), "10000");
    // OpenAI charges max_tokens (50) at admission: more than the prompt's 8.
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "9950");
    assert!(header(&response, "x-ratelimit-reset-requests").ends_with('s'));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    // "Say hello to the mock server." is 29 characters: 8 tokens.
    assert_eq!(body["usage"]["prompt_tokens"], 8);
    let completion = body["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((3..=12).contains(&completion), "{completion}");
    assert_eq!(body["usage"]["total_tokens"], 8 + completion);
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(content.split(' ').count() as u64, completion);
}

#[tokio::test]
async fn openai_refuses_past_its_requests_limit_with_429_and_retry_headers() {
    let server = MockServer::start(
        "openai-429",
        &openai_config(
            r#"{ dimension = "requests", amount = 2, window = "1m" },
        { dimension = "tokens", amount = 10000, window = "1m" }"#,
        ),
    );
    for _ in 0..2 {
        assert_eq!(server.openai(&chat(false)).await.status(), 200);
    }
    let response = server.openai(&chat(false)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(header(&response, "x-ratelimit-remaining-requests"), "0");
    assert_eq!(header(&response, "x-ratelimit-limit-requests"), "2");
    assert!(header(&response, "x-ratelimit-reset-requests").ends_with('s'));
    let retry_after: u64 = header(&response, "retry-after").parse().unwrap();
    let retry_after_ms: u64 = header(&response, "retry-after-ms").parse().unwrap();
    assert!(retry_after >= 1 && retry_after_ms > 0 && retry_after_ms <= retry_after * 1000);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert_eq!(body["error"]["type"], "requests");
}

#[tokio::test]
async fn openai_streams_chunks_then_usage_then_done() {
    let server = MockServer::start(
        "openai-stream",
        &openai_config(r#"{ dimension = "tokens", amount = 10000, window = "1m" }"#),
    );
    let response = server.openai(&chat(true)).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").starts_with("text/event-stream"));
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "9950");
    let events = sse(&response.text().await.unwrap());
    let (last, rest) = events.split_last().unwrap();
    assert_eq!(last.1, "[DONE]");
    let chunks: Vec<Value> = rest.iter().map(|(_, data)| serde_json::from_str(data).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let (usage_chunk, content_chunks) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let completion = usage_chunk["usage"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], 8);
    let text: String = content_chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text.split(' ').count() as u64, completion);
    assert_eq!(content_chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn anthropic_answers_with_rfc3339_resets() {
    let server = MockServer::start(
        "anthropic-plain",
        &anthropic_config(
            r#"{ dimension = "requests", amount = 50, window = "1m" },
        { dimension = "input_tokens", amount = 30000, window = "1m" },
        { dimension = "output_tokens", amount = 8000, window = "1m" }"#,
        ),
    );
    let response = server.anthropic(&message(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "anthropic-ratelimit-requests-remaining"), "49");
    // System and message: 9 + 29 characters, 10 tokens.
    assert_eq!(header(&response, "anthropic-ratelimit-input-tokens-remaining"), "29990");
    assert_eq!(header(&response, "anthropic-ratelimit-output-tokens-remaining"), "7950");
    for name in ["requests", "input-tokens", "output-tokens"] {
        let reset = header(&response, &format!("anthropic-ratelimit-{name}-reset"));
        humantime::parse_rfc3339(&reset).unwrap_or_else(|e| panic!("{name} reset {reset:?}: {e}"));
    }
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["type"].as_str(), body["role"].as_str()), (Some("message"), Some("assistant")));
    assert_eq!(body["usage"]["input_tokens"], 10);
    assert_eq!(body["stop_reason"], "end_turn");
    let output = body["usage"]["output_tokens"].as_u64().unwrap();
    assert_eq!(body["content"][0]["type"], "text");
    assert_eq!(body["content"][0]["text"].as_str().unwrap().split(' ').count() as u64, output);
}

#[tokio::test]
async fn anthropic_refuses_with_rate_limit_error_and_retry_after() {
    let server = MockServer::start(
        "anthropic-429",
        &anthropic_config(r#"{ dimension = "requests", amount = 1, window = "1m" }"#),
    );
    assert_eq!(server.anthropic(&message(false)).await.status(), 200);
    let response = server.anthropic(&message(false)).await;
    assert_eq!(response.status(), 429);
    assert!(header(&response, "retry-after").parse::<u64>().unwrap() >= 1);
    assert!(header(&response, "retry-after-ms").parse::<u64>().unwrap() > 0);
    assert_eq!(header(&response, "anthropic-ratelimit-requests-remaining"), "0");
    humantime::parse_rfc3339(&header(&response, "anthropic-ratelimit-requests-reset")).unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
}

#[tokio::test]
async fn anthropic_streams_its_events_with_usage() {
    let server = MockServer::start(
        "anthropic-stream",
        &anthropic_config(r#"{ dimension = "output_tokens", amount = 8000, window = "1m" }"#),
    );
    let response = server.anthropic(&message(true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "anthropic-ratelimit-output-tokens-remaining"), "7950");
    let events = sse(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_deref().expect("named events")).collect();
    let data: Vec<Value> = events.iter().map(|(_, data)| serde_json::from_str(data).unwrap()).collect();
    assert_eq!(names[..2], ["message_start", "content_block_start"]);
    assert_eq!(names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    assert!(names.iter().zip(&data).all(|(name, data)| data["type"] == *name));
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], 10);
    let text: String = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .map(|d| d["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    let delta = &data[data.len() - 2];
    assert_eq!(delta["usage"]["output_tokens"].as_u64().unwrap(), text.split(' ').count() as u64);
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
}

/// A request costing more than a limit ever holds used to get an ordinary
/// 429 with a `retry-after`, forever: a client that obeyed it never got
/// through. It is refused as OpenAI refuses it, with nothing to wait for.
#[tokio::test]
async fn a_request_larger_than_a_limit_is_too_large_with_no_retry_after() {
    let config = format!(
        "{}\n[anthropic]\nshape = \"anthropic\"\nlimits = [{{ dimension = \"output_tokens\", amount = 40, window = \"1m\" }}]\n{LATENCY}",
        openai_config(r#"{ dimension = "tokens", amount = 1000, window = "1m", enforce_every = "1s" }"#)
    );
    let server = MockServer::start("too-large", &config);
    // 50 tokens fit the 1000 a minute, not its 16 a second.
    let response = server.openai(&chat(false)).await;
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("retry-after").is_none() && response.headers().get("retry-after-ms").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (body["error"]["code"].as_str(), body["error"]["type"].as_str()),
        (Some("rate_limit_exceeded"), Some("tokens"))
    );
    let text = body["error"]["message"].as_str().unwrap();
    assert!(text.starts_with("Request too large for tokens per 1s: Limit 16, Requested 50."), "{text}");

    let response = server.anthropic(&message(false)).await;
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("retry-after").is_none());
    let raw = response.text().await.unwrap();
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let text = body["error"]["message"].as_str().unwrap();
    assert!(text.starts_with("Request too large for output_tokens per 1m: Limit 40, Requested 50."), "{text}");
    // llmgov reads it as a request to shrink, not one to retry.
    let no_headers: &[(&str, &str)] = &[];
    let classification = llmgov::classify_response(429, no_headers, raw.as_bytes(), llmgov::ProviderHint::Auto, 0);
    assert_eq!(classification.kind, llmgov::LimitKind::TooLarge);
}

/// The shipped gpt-4o tier-1 example held its 30,000 tokens a minute over
/// each second too, 500 tokens: every request without `max_tokens` (charged
/// 1024) was refused, forever.
#[tokio::test]
async fn the_openai_tier1_example_serves_a_request_without_max_tokens() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("mock/openai-tier1.toml");
    let (child, base) = spawn(&example);
    let server = MockServer { child, base, config: std::env::temp_dir().join("llmgov-mock-none.toml") };
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    // A stream's headers come at once; its tokens are not awaited.
    let response = server.openai(&body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "28976");
}

#[tokio::test]
async fn malformed_requests_get_400_in_each_shape() {
    let config = format!("{}\n[anthropic]\nshape = \"anthropic\"\n{LATENCY}", openai_config(""));
    let server = MockServer::start("malformed", &config);
    let client = reqwest::Client::new();
    let response = client.post(server.url("/v1/chat/completions")).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("JSON"));

    let mut no_max_tokens = message(false);
    no_max_tokens.as_object_mut().unwrap().remove("max_tokens");
    let response = server.anthropic(&no_max_tokens).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["message"], "max_tokens: Field required");

    let response = server.openai(&json!({"model": "gpt-4o", "messages": []})).await;
    assert_eq!(response.status(), 400);
}

/// A body that is JSON but not an object was read as the struct's fields
/// in order ("[0]: invalid type: integer `1`, expected a string"); another
/// method got axum's bare 405, a body over the size limit its plain-text 413.
#[tokio::test]
async fn odd_bodies_methods_and_sizes_are_answered_in_each_shape() {
    let config = format!("{}\n[anthropic]\nshape = \"anthropic\"\n{LATENCY}", openai_config(""));
    let server = MockServer::start("odd-bodies", &config);
    let client = reqwest::Client::new();
    for (path, body) in [("/v1/chat/completions", "[1, 2]"), ("/v1/messages", "\"hi\""), ("/v1/messages", " [1")] {
        let response = client.post(server.url(path)).body(body).send().await.unwrap();
        assert_eq!(response.status(), 400, "{path} {body}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["message"], "the request body must be a JSON object");
    }

    let response = client.get(server.url("/v1/chat/completions")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(header(&response, "allow"), "POST");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let response = client.put(server.url("/v1/messages")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["type"].as_str(), body["error"]["type"].as_str()), (Some("error"), Some("invalid_request_error")));

    // Over the 64 MiB the server reads.
    let mut huge = br#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ""#.to_vec();
    huge.resize(huge.len() + (65 << 20), b'a');
    huge.extend_from_slice(br#""}]}"#);
    let response = client.post(server.url("/v1/messages")).body(huge).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "request_too_large");
}

#[tokio::test]
async fn billing_and_overload_refusals_keep_their_kinds() {
    let config = format!(
        "{FAST}\n[openai]\nshape = \"openai\"\nchaos = {{ quota_exhausted = true }}\n{LATENCY}\n\
         [anthropic]\nshape = \"anthropic\"\nchaos = {{ error_529 = 1.0 }}\n{LATENCY}"
    );
    let server = MockServer::start("chaos", &config);
    let response = server.openai(&chat(false)).await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_quota");
    assert_eq!(body["error"]["type"], "insufficient_quota");

    let response = server.anthropic(&message(false)).await;
    assert_eq!(response.status(), 529);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn an_api_without_a_provider_answers_404_in_its_shape() {
    let server = MockServer::start("openai-only", &openai_config(""));
    let response = server.anthropic(&message(false)).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "not_found_error");
}

#[test]
fn a_bad_config_stops_the_server_naming_file_field_and_value() {
    let (output, config) = refused_config("bad", "[anthropic]\nshape = \"openai\"\n");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "no address line");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&*config.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("anthropic.shape") && stderr.contains("openai"), "{stderr}");
}

/// Answers were unbounded: with `output_tokens.max = 1e12`, one request
/// with a large `max_tokens` had the server build terabytes of filler text.
#[test]
fn an_answer_length_past_a_million_tokens_is_refused_at_load() {
    let (output, _) = refused_config(
        "huge-answers",
        "[server]\noutput_tokens = { min = 1, max = 1000000000000 }\n[openai]\nshape = \"openai\"\n",
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`server.output_tokens.max` = `1000000000000`: must be at most 1000000"), "{stderr}");
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_server_cleanly() {
    let config = write_config("sigterm", &openai_config(""));
    let (mut child, _) = spawn(&config);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // A bounded wait, so that a server ignoring the signal fails the test
    // instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait()));
    let status = rx.recv_timeout(std::time::Duration::from_secs(20));
    let _ = std::fs::remove_file(&config);
    let Ok(status) = status else {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        panic!("the server ignored SIGTERM");
    };
    assert!(status.unwrap().success());
}
