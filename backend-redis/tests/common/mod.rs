//! Shared by the Redis tests: the server URL, fresh key prefixes, worker
//! processes (the test binary re-running itself), and a private redis-server.

#![allow(dead_code)] // each test binary uses a different part

pub mod cluster;
pub mod sentinel;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The env var naming the Redis the tests run against.
pub const URL_VAR: &str = "LLMGOV_REDIS_URL";
/// The server binary the tests that start their own run (default `redis-server`).
pub const SERVER_VAR: &str = "LLMGOV_REDIS_SERVER";
/// Set in a worker process: which worker body to run.
pub const WORKER_VAR: &str = "LLMGOV_REDIS_TEST_WORKER";
/// `redis.timeout` in every test config where Redis is meant to answer: far
/// above the 250 ms default, so a call slowed by a loaded machine is not
/// taken for an outage (which would send the governor to its safe share and
/// break the test's exact counts). Refused connections still fail at once.
pub const TIMEOUT: &str = "2s";

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

/// A loopback port nobody listens on right now (another process may take it
/// before it is bound: [`PrivateRedis::start`] retries on a new one).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The log line a redis-server or valkey-server prints once it listens.
const READY: &str = "Ready to accept connections";
/// How many fresh ports [`PrivateRedis::start`] tries before giving up.
const PORT_ATTEMPTS: usize = 3;

/// Which socket the private server listens on: the chosen port serves
/// plain RESP, or only TLS (plain TCP off).
#[derive(Clone, Copy)]
pub enum Listen {
    Plain,
    TlsOnly,
}

/// A redis-server of the test's own, on a loopback port, killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    test: String,
    listen: Listen,
    args: Vec<String>,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts `redis-server` (or the server `LLMGOV_REDIS_SERVER` names,
    /// e.g. a `valkey-server`) on a free loopback port without persistence
    /// (extra `args` appended), or `None` (said loudly) if the binary is
    /// missing. A port someone took between choosing and binding is retried
    /// on a new one.
    pub fn start(test: &str, listen: Listen, args: &[&str]) -> Option<Self> {
        let mut server = PrivateRedis {
            port: 0,
            test: test.to_owned(),
            listen,
            args: args.iter().map(|&a| a.to_owned()).collect(),
            child: None,
        };
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            match server.spawn()? {
                Started::Ready => return Some(server),
                Started::PortTaken(log) => eprintln!("{}: port {} was taken, trying another\n{log}", test, server.port),
            }
        }
        panic!("{test}: no free port in {PORT_ATTEMPTS} attempts");
    }

    /// Starts the stopped server again, empty, on the same port (the
    /// governors under test name it in their URL, so it cannot move).
    pub fn restart(&mut self) {
        self.stop();
        match self.spawn() {
            Some(Started::Ready) => {}
            Some(Started::PortTaken(log)) => panic!("{}: port {} was taken on restart\n{log}", self.test, self.port),
            None => panic!("{}: the server binary vanished", self.test),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs the server on `self.port` and waits until it says it listens:
    /// its own log line, so a process that took the port first is never
    /// mistaken for it.
    fn spawn(&mut self) -> Option<Started> {
        let server = std::env::var(SERVER_VAR).unwrap_or_else(|_| "redis-server".to_owned());
        let port = self.port.to_string();
        let listen: &[&str] = match self.listen {
            Listen::Plain => &["--port", &port],
            Listen::TlsOnly => &["--port", "0", "--tls-port", &port],
        };
        let child = Command::new(&server)
            .args(listen)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "notice"])
            .args(&self.args)
            .stdout(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                eprintln!("SKIPPED {}: cannot run {server} ({e})", self.test);
                return None;
            }
        };
        let lines = log_lines(child.stdout.take().expect("piped stdout"));
        let mut log = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains(READY) => {
                    self.child = Some(child);
                    return Some(Started::Ready);
                }
                Ok(line) => log.push_str(&line),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = child.wait().expect("waiting for the server");
                    if log.contains("Address already in use") {
                        return Some(Started::PortTaken(log));
                    }
                    panic!("{}: {server} on port {port} exited ({status}) before listening\n{log}", self.test);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{}: {server} on port {port} did not listen within 10 s\n{log}", self.test);
                }
            }
        }
    }

    /// Stops the server at once (SIGKILL): every key it held is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

enum Started {
    Ready,
    /// The port was bound by someone else first; the server's log.
    PortTaken(String),
}

/// The server's log, line by line, read on a thread that keeps draining it
/// (so the server never blocks on a full pipe) until the server exits.
fn log_lines(stdout: ChildStdout) -> Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            let _ = sender.send(std::mem::take(&mut line));
        }
    });
    receiver
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP proxy in front of a Redis that can lose the server's replies
/// while still passing requests on: a network that fails after a request
/// left, so Redis runs a script whose caller times out waiting for it.
pub struct ReplyDroppingProxy {
    pub port: u16,
    dropping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cutting: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ReplyDroppingProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `target_port`, until the test process ends.
    pub fn start(target_port: u16) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dropping = Arc::new(AtomicBool::new(false));
        let cutting = Arc::new(AtomicBool::new(false));
        let (flag, cut) = (dropping.clone(), cutting.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target_port)) else { return };
                let (mut to_server, mut from_client) = (server.try_clone().unwrap(), client.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut from_client, &mut to_server));
                let (mut from_server, mut to_client, flag, cut) = (server, client, flag.clone(), cut.clone());
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buffer = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = from_server.read(&mut buffer) {
                        if cut.swap(false, Ordering::AcqRel) {
                            let _ = to_client.shutdown(std::net::Shutdown::Both);
                            let _ = from_server.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        if !flag.load(Ordering::Acquire) && to_client.write_all(&buffer[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        ReplyDroppingProxy { port, dropping, cutting }
    }

    /// The next reply from Redis is not passed on: its connection is closed
    /// instead (the call ran, and the caller sees the connection drop).
    pub fn cut_next_reply(&self) {
        self.cutting.store(true, std::sync::atomic::Ordering::Release);
    }

    /// From now on, replies are read from Redis and thrown away (`true`),
    /// or passed on again (`false`).
    pub fn drop_replies(&self, dropping: bool) {
        self.dropping.store(dropping, std::sync::atomic::Ordering::Release);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Acquires and settles up to `most` requests of one token on `route`; how
/// many passed before the first refusal.
pub fn admit(gov: &llmgov_redis::RedisGovernor, route: &llmgov_redis::SharedRoute, most: u64) -> u64 {
    let mut admitted = 0;
    while admitted < most {
        match gov.try_acquire(route, llmgov::Usage::new(1, 0)) {
            Ok(mut permit) => {
                gov.settle(&mut permit, llmgov::Usage::new(1, 0)).unwrap();
                admitted += 1;
            }
            Err(llmgov_redis::Error::RateLimited { .. }) => break,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    admitted
}
