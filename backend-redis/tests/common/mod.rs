//! Shared by the Redis tests: the server URL, fresh key prefixes, worker
//! processes (the test binary re-running itself), and a private redis-server.

#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The env var naming the Redis the tests run against.
pub const URL_VAR: &str = "LLMGOV_REDIS_URL";
/// The server binary the tests that start their own run (default `redis-server`).
pub const SERVER_VAR: &str = "LLMGOV_REDIS_SERVER";
/// Set in a worker process: which worker body to run.
pub const WORKER_VAR: &str = "LLMGOV_REDIS_TEST_WORKER";

/// The Redis URL, or `None` after saying loudly that the test is skipped.
pub fn redis_url(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("SKIPPED {test}: {URL_VAR} is not set (run `make test-redis`, which starts a redis-server)");
            None
        }
    }
}

/// A key prefix no other test or run shares.
pub fn fresh_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("test-{test}-{}-{nanos}", std::process::id())
}

/// Starts this test binary again as a worker running the `#[test]` named
/// `entry`, with `role` and `env` in its environment; stdout is piped.
pub fn spawn_worker(entry: &str, role: &str, env: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([entry, "--exact", "--nocapture", "--test-threads=1"]).env(WORKER_VAR, role);
    for (key, value) in env {
        command.env(key, value);
    }
    command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawning a worker")
}

/// Reads a worker's stdout until a line holds `key=`, returning what follows.
pub fn read_value(child: &mut Child, key: &str) -> String {
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let prefix = format!("{key}=");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).expect("reading a worker");
        assert!(read > 0, "worker ended without printing {key}=");
        // libtest may print "test name ... " on the same line first.
        if let Some(at) = line.find(&prefix) {
            return line[at + prefix.len()..].trim_end().to_owned();
        }
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A redis-server of the test's own, on a loopback port, killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts `redis-server` (or the server `LLMGOV_REDIS_SERVER` names,
    /// e.g. a `valkey-server`) without persistence (extra `args` appended),
    /// or `None` (said loudly) if the binary is missing.
    pub fn start(test: &str, port: u16, args: &[&str]) -> Option<Self> {
        let server = std::env::var(SERVER_VAR).unwrap_or_else(|_| "redis-server".to_owned());
        let child = Command::new(&server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                eprintln!("SKIPPED {test}: cannot run {server} ({e})");
                return None;
            }
        };
        let server = PrivateRedis { port, child: Some(child) };
        server.wait_listening();
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not listen", self.port);
    }

    /// Stops the server at once (SIGKILL): every key it held is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
