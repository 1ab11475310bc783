//! A private Redis Sentinel setup: a master, one replica of it, and one
//! Sentinel (quorum 1) watching them as `mymaster`, on loopback ports.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, fresh_prefix, Listen, PrivateRedis, SERVER_VAR};

/// The name the Sentinel knows the master by.
pub const MASTER: &str = "mymaster";
/// How long replication, the Sentinel's discovery and a failover may take.
const SETTLING: Duration = Duration::from_secs(30);

pub struct PrivateSentinel {
    pub master: PrivateRedis,
    pub replica: PrivateRedis,
    pub port: u16,
    child: Child,
    /// The Sentinel's config (which it rewrites) and the servers' RDB
    /// files, removed on drop.
    files: Vec<PathBuf>,
}

impl PrivateSentinel {
    /// Starts the master, its replica and the Sentinel, and waits until the
    /// replica is in sync and the Sentinel knows it; `None` (said loudly) if
    /// the server binary is missing.
    pub fn start(test: &str) -> Option<Self> {
        // A replica loads its master's data through an RDB file: one of its
        // own (the demoted master becomes a replica too), in the temporary
        // directory rather than the test's working directory.
        let dir = std::env::temp_dir();
        let dir_arg = dir.to_string_lossy().into_owned();
        let [master_rdb, replica_rdb] = ["master", "replica"].map(|role| format!("{}-{role}.rdb", fresh_prefix(test)));
        let master = PrivateRedis::start(test, Listen::Plain, &["--dir", &dir_arg, "--dbfilename", &master_rdb])?;
        let master_port = master.port.to_string();
        let replica_args = ["--dir", &dir_arg, "--dbfilename", &replica_rdb, "--replicaof", "127.0.0.1", &master_port];
        let replica = PrivateRedis::start(test, Listen::Plain, &replica_args)?;
        let config_file = std::env::temp_dir().join(format!("{}-sentinel.conf", fresh_prefix(test)));
        let mut config = std::fs::File::create(&config_file).unwrap();
        writeln!(config, "sentinel monitor {MASTER} 127.0.0.1 {master_port} 1").unwrap();
        writeln!(config, "sentinel down-after-milliseconds {MASTER} 1000").unwrap();
        writeln!(config, "sentinel failover-timeout {MASTER} 10000").unwrap();
        let server = std::env::var(SERVER_VAR).unwrap_or_else(|_| "redis-server".to_owned());
        let port = free_port();
        let child = Command::new(&server)
            .arg(&config_file)
            .args(["--sentinel", "--port", &port.to_string(), "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: cannot run {server} --sentinel ({e})"));
        let files = vec![config_file, dir.join(master_rdb), dir.join(replica_rdb)];
        let sentinel = PrivateSentinel { master, replica, port, child, files };
        sentinel.wait_for("the replica in sync and known to the Sentinel", |s| {
            s.replica_in_sync() && s.known_replicas() == 1
        });
        Some(sentinel)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn sentinel(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url()).ok()?.get_connection_with_timeout(Duration::from_secs(1)).ok()
    }

    /// The port of the master the Sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let mut sentinel = self.sentinel()?;
        let address: Option<(String, u16)> =
            redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(MASTER).query(&mut sentinel).ok()?;
        address.map(|(_, port)| port)
    }

    fn known_replicas(&self) -> usize {
        let Some(mut sentinel) = self.sentinel() else { return 0 };
        let replicas: redis::RedisResult<Vec<redis::Value>> =
            redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER).query(&mut sentinel);
        replicas.map_or(0, |r| r.len())
    }

    fn replica_in_sync(&self) -> bool {
        let info = replication(&self.replica);
        info.contains("role:slave") && info.contains("master_link_status:up")
    }

    /// Has the Sentinel promote the replica, and waits until it names it
    /// and has made the old master a replica (which writes no more).
    pub fn fail_over(&self) {
        self.wait_for("the Sentinel to accept the failover", |s| {
            let Some(mut sentinel) = s.sentinel() else { return false };
            redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER).query::<()>(&mut sentinel).is_ok()
        });
        self.wait_for("the Sentinel to name the replica", |s| s.master_port() == Some(s.replica.port));
        self.wait_for("the old master to be a replica", |s| replication(&s.master).contains("role:slave"));
    }

    /// Polls `done` until it holds: replication and the Sentinel's rounds
    /// run on their own clocks, not the test's.
    fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + SETTLING;
        while !done(self) {
            assert!(Instant::now() < deadline, "waited {SETTLING:?} for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether `server` says it is a master.
pub fn is_master(server: &PrivateRedis) -> bool {
    replication(server).contains("role:master")
}

/// Keys on `server`.
pub fn keys_on(server: &PrivateRedis) -> usize {
    let client = redis::Client::open(server.url()).unwrap();
    redis::cmd("DBSIZE").query(&mut client.get_connection().unwrap()).unwrap()
}

/// `server`'s `INFO replication` ("" if it does not answer).
fn replication(server: &PrivateRedis) -> String {
    let client = redis::Client::open(server.url()).unwrap();
    let Ok(mut connection) = client.get_connection() else { return String::new() };
    redis::cmd("INFO").arg("replication").query(&mut connection).unwrap_or_default()
}

impl Drop for PrivateSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}
