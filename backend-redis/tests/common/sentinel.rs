//! A private Redis Sentinel setup: a master, one replica of it, and one
//! Sentinel (quorum 1) watching them as `mymaster`, on loopback ports, in
//! plain TCP or all over TLS.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, fresh_prefix, Listen, PrivateRedis, SERVER_VAR, TIMEOUT};

/// The name the Sentinel knows the master by.
pub const MASTER: &str = "mymaster";
/// How long replication, the Sentinel's discovery and a failover may take.
const SETTLING: Duration = Duration::from_secs(30);

pub struct PrivateSentinel {
    pub master: PrivateRedis,
    pub replica: PrivateRedis,
    pub port: u16,
    listen: Listen,
    /// A client of the server on a port (the test's own checks).
    client: Box<dyn Fn(u16) -> redis::Client + Send + Sync>,
    child: Child,
    /// The Sentinel's config (which it rewrites) and the servers' RDB
    /// files, removed on drop.
    files: Vec<PathBuf>,
}

impl PrivateSentinel {
    /// Starts the master, its replica and the Sentinel in plain TCP, and
    /// waits until the replica is in sync and the Sentinel knows it; `None`
    /// (said loudly) if the server binary is missing.
    pub fn start(test: &str) -> Option<Self> {
        Self::start_with(test, Listen::Plain, &[], |port| {
            redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap()
        })
    }

    /// As [`Self::start`], each server listening as `listen` with `args`
    /// (for TLS: the certificates, and `--tls-replication yes` for the
    /// replica's and the Sentinel's links), checked through `client`.
    pub fn start_with(
        test: &str,
        listen: Listen,
        args: &[&str],
        client: impl Fn(u16) -> redis::Client + Send + Sync + 'static,
    ) -> Option<Self> {
        // A replica loads its master's data through an RDB file: one of its
        // own (the demoted master becomes a replica too), in the temporary
        // directory rather than the test's working directory.
        let dir = std::env::temp_dir();
        let dir_arg = dir.to_string_lossy().into_owned();
        let [master_rdb, replica_rdb] = ["master", "replica"].map(|role| format!("{}-{role}.rdb", fresh_prefix(test)));
        let master_args = [&["--dir", &dir_arg, "--dbfilename", &master_rdb][..], args].concat();
        let master = PrivateRedis::start(test, listen, &master_args)?;
        let master_port = master.port.to_string();
        let replica_args = ["--dir", &dir_arg, "--dbfilename", &replica_rdb, "--replicaof", "127.0.0.1", &master_port];
        let replica = PrivateRedis::start(test, listen, &[&replica_args[..], args].concat())?;
        let config_file = std::env::temp_dir().join(format!("{}-sentinel.conf", fresh_prefix(test)));
        let mut config = std::fs::File::create(&config_file).unwrap();
        writeln!(config, "sentinel monitor {MASTER} 127.0.0.1 {master_port} 1").unwrap();
        writeln!(config, "sentinel down-after-milliseconds {MASTER} 1000").unwrap();
        writeln!(config, "sentinel failover-timeout {MASTER} 10000").unwrap();
        let server = std::env::var(SERVER_VAR).unwrap_or_else(|_| "redis-server".to_owned());
        let port = free_port();
        let port_arg = port.to_string();
        let listen_args: &[&str] = match listen {
            Listen::Plain => &["--port", &port_arg],
            Listen::TlsOnly => &["--port", "0", "--tls-port", &port_arg],
        };
        let child = Command::new(&server)
            .arg(&config_file)
            .arg("--sentinel")
            .args(listen_args)
            .args(["--bind", "127.0.0.1"])
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: cannot run {server} --sentinel ({e})"));
        let files = vec![config_file, dir.join(master_rdb), dir.join(replica_rdb)];
        let client = Box::new(client);
        let sentinel = PrivateSentinel { master, replica, port, listen, client, child, files };
        sentinel.wait_for("the replica in sync and known to the Sentinel", |s| {
            s.replica_in_sync() && s.known_replicas() == 1
        });
        Some(sentinel)
    }

    /// The Sentinel's url.
    pub fn url(&self) -> String {
        let scheme = match self.listen {
            Listen::Plain => "redis",
            Listen::TlsOnly => "rediss",
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    fn sentinel(&self) -> Option<redis::Connection> {
        (self.client)(self.port).get_connection_with_timeout(Duration::from_secs(1)).ok()
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
        let info = self.replication(&self.replica);
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
        self.wait_for("the old master to be a replica", |s| s.replication(&s.master).contains("role:slave"));
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

    /// Whether `server` says it is a master.
    pub fn is_master(&self, server: &PrivateRedis) -> bool {
        self.replication(server).contains("role:master")
    }

    /// Keys on `server`.
    pub fn keys_on(&self, server: &PrivateRedis) -> usize {
        redis::cmd("DBSIZE").query(&mut (self.client)(server.port).get_connection().unwrap()).unwrap()
    }

    /// `server`'s `INFO replication` ("" if it does not answer).
    fn replication(&self, server: &PrivateRedis) -> String {
        let Ok(mut connection) = (self.client)(server.port).get_connection() else { return String::new() };
        redis::cmd("INFO").arg("replication").query(&mut connection).unwrap_or_default()
    }
}

/// A governor's config behind `sentinels` watching the master `url` names
/// (plus `extra` lines of `[redis]`): one shared scope `team` of `n`
/// requests an hour, exact mode.
pub fn sentinel_config(url: &str, sentinels: &[String], extra: &str, test: &str, n: u64) -> String {
    format!(
        r#"
        [scopes."team"]
        limits = [{{ dimension = "requests", amount = {n}, window = "1h", algorithm = "token_bucket" }}]
        [redis]
        url = "{url}"
        sentinels = {sentinels:?}
        {extra}
        prefix = "{}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."team"]
        mode = "exact"
        "#,
        fresh_prefix(test),
    )
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
