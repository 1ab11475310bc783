//! A private Redis Cluster: three masters on loopback ports, each serving a
//! third of the hash slots, formed with CLUSTER ADDSLOTSRANGE and MEET.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{free_port, fresh_prefix, Listen, PrivateRedis, TIMEOUT};

/// Hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;
const NODES: u16 = 3;
/// How long the nodes may take to agree that the cluster is up (gossip).
const CONVERGENCE: Duration = Duration::from_secs(30);

pub struct PrivateCluster {
    pub nodes: Vec<PrivateRedis>,
    /// Each node's cluster bus port, which CLUSTER MEET names.
    bus_ports: Vec<u16>,
    /// A client of one node, by port (plain or TLS, as the nodes serve).
    client: Box<dyn Fn(u16) -> redis::Client + Send + Sync>,
    /// Each node's `nodes.conf`, removed on drop.
    config_files: Vec<PathBuf>,
}

impl PrivateCluster {
    /// Starts the nodes with `args` besides the cluster's own, forms the
    /// cluster and waits until every node serves it; `None` (said loudly)
    /// if the server binary is missing.
    pub fn start(
        test: &str,
        listen: Listen,
        args: &[&str],
        client: impl Fn(u16) -> redis::Client + Send + Sync + 'static,
    ) -> Option<Self> {
        let mut cluster = PrivateCluster {
            nodes: Vec::new(),
            bus_ports: Vec::new(),
            client: Box::new(client),
            config_files: Vec::new(),
        };
        for i in 0..NODES {
            let file = std::env::temp_dir().join(format!("{}-node{i}.conf", fresh_prefix(test)));
            let file_arg = file.to_string_lossy().into_owned();
            cluster.config_files.push(file);
            // The bus port defaults to the port + 10000, past 65535 for a
            // high ephemeral port: it is chosen as freely as the port.
            let bus_port = free_port();
            cluster.bus_ports.push(bus_port);
            let bus_port = bus_port.to_string();
            let cluster_args =
                ["--cluster-enabled", "yes", "--cluster-config-file", &file_arg, "--cluster-port", &bus_port];
            cluster.nodes.push(PrivateRedis::start(test, listen, &[&cluster_args[..], args].concat())?);
        }
        let per_node = SLOTS / NODES;
        for i in 0..NODES {
            let first = per_node * i;
            let last = if i == NODES - 1 { SLOTS - 1 } else { first + per_node - 1 };
            let mut node = cluster.connect(usize::from(i));
            let () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(first).arg(last).query(&mut node).unwrap();
        }
        let mut first = cluster.connect(0);
        for (node, bus_port) in cluster.nodes.iter().zip(&cluster.bus_ports).skip(1) {
            let mut meet = redis::cmd("CLUSTER");
            meet.arg("MEET").arg("127.0.0.1").arg(node.port).arg(bus_port);
            let () = meet.query(&mut first).unwrap();
        }
        cluster.wait_until_up();
        Some(cluster)
    }

    /// Polls every node until each knows all the others and serves every
    /// slot: the nodes agree through gossip, on no clock of the test's.
    fn wait_until_up(&self) {
        let deadline = Instant::now() + CONVERGENCE;
        loop {
            let up = (0..self.nodes.len()).all(|i| {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut self.connect(i)).unwrap();
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{NODES}"))
                    && info.contains(&format!("cluster_slots_ok:{SLOTS}"))
            });
            if up {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not come up within {CONVERGENCE:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A connection to node `i`.
    pub fn connect(&self, i: usize) -> redis::Connection {
        (self.client)(self.nodes[i].port).get_connection().unwrap()
    }

    /// The node that served `slot` when the cluster was formed.
    pub fn first_owner(&self, slot: u16) -> usize {
        usize::from(slot / (SLOTS / NODES)).min(usize::from(NODES) - 1)
    }

    /// The hash slot of a shared scope's keys (`{llmgov:<prefix>:<path>}`).
    pub fn slot_of(&self, prefix: &str, path: &str) -> u16 {
        slot_of(&mut self.connect(0), prefix, path)
    }

    /// One scope path per node: `team-<n>`, the first whose slot the node
    /// served when the cluster was formed.
    pub fn one_scope_per_node(&self, prefix: &str) -> Vec<String> {
        let mut node = self.connect(0);
        let mut chosen = vec![None; self.nodes.len()];
        for n in 0.. {
            let path = format!("team-{n}");
            let owner = self.first_owner(slot_of(&mut node, prefix, &path));
            chosen[owner].get_or_insert(path);
            if chosen.iter().all(Option::is_some) {
                break;
            }
        }
        chosen.into_iter().flatten().collect()
    }
}

fn slot_of(node: &mut redis::Connection, prefix: &str, path: &str) -> u16 {
    let key = format!("{{llmgov:{prefix}:{path}}}:state");
    redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(node).unwrap()
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
        for file in &self.config_files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// A config of a governor on the cluster at `url`: every path in `paths` a
/// shared scope of `mode` with `limits` (a TOML array), expecting 2
/// processes. `redis` adds lines to the `[redis]` section.
pub fn cluster_config(url: &str, prefix: &str, mode: &str, paths: &[String], limits: &str, redis: &str) -> String {
    let mut text = String::new();
    for path in paths {
        text += &format!("[scopes.\"{path}\"]\nlimits = {limits}\n");
    }
    text += &format!(
        "[redis]\nurl = \"{url}\"\ncluster = true\nprefix = \"{prefix}\"\nexpected_processes = 2\ntimeout = \"{TIMEOUT}\"\n{redis}\n"
    );
    for path in paths {
        text += &format!("[redis.scopes.\"{path}\"]\nmode = \"{mode}\"\n");
    }
    text
}

/// `n` requests an hour as a token bucket (no refill within a test), as
/// `limits` of [`cluster_config`].
pub fn requests_an_hour(n: u64) -> String {
    format!("[{{ dimension = \"requests\", amount = {n}, window = \"1h\", algorithm = \"token_bucket\" }}]")
}
