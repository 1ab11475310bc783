//! `rediss://` against redis-servers serving TLS only (one, a Cluster, and
//! a master, replica and Sentinel), with a CA made for the test by openssl. Built and run with `--features tls` (make test-redis
//! does); without the feature this file compiles to nothing.

#![cfg(feature = "tls")]

mod common;

use std::path::Path;
use std::process::Command;

use common::cluster::{cluster_config, requests_an_hour, PrivateCluster};
use common::sentinel::{sentinel_config, PrivateSentinel, MASTER};
use common::{fresh_prefix, Listen, PrivateRedis, TIMEOUT};
use llmgov::Usage;
use llmgov_redis::{RedisGovernor, SharedRoute};

fn openssl(dir: &Path, args: &[&str]) -> bool {
    match Command::new("openssl").args(args).current_dir(dir).output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => panic!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            eprintln!("SKIPPED tls: cannot run openssl ({e})");
            false
        }
    }
}

/// A CA and a server certificate for 127.0.0.1, in a fresh directory.
fn certificates(dir: &Path) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    let days = ["-days", "1"];
    openssl(
        dir,
        &[
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt"][..],
            &days,
            &["-subj", "/CN=llmgov test CA"],
        ]
        .concat(),
    ) && openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ) && openssl(
        dir,
        &[
            &["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"][..],
            &days,
            &["-out", "server.crt", "-extfile", "san.ext"],
        ]
        .concat(),
    )
}

#[test]
fn rediss_with_a_private_ca_admits_through_tls() {
    let dir = std::env::temp_dir().join(fresh_prefix("tls"));
    if !certificates(&dir) {
        return;
    }
    let (tls, ca) = server_tls(&dir);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let Some(redis) = PrivateRedis::start("tls", Listen::TlsOnly, &tls) else { return };
    let port = redis.port;
    let gov = RedisGovernor::from_toml(&format!(
        r#"
        [scopes."p/shared"]
        limits = [{{ dimension = "requests", amount = 5, window = "1d" }}]
        [redis]
        url = "rediss://127.0.0.1:{port}"
        tls_ca_file = "{ca}"
        prefix = "{}"
        expected_processes = 5
        timeout = "{TIMEOUT}" # a debug build's TLS handshake on a loaded machine
        [redis.scopes."p/shared"]
        mode = "exact"
        "#,
        fresh_prefix("tls")
    ))
    .unwrap();
    five_then_refused(&gov, &gov.route(&["p/shared"]).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server's TLS arguments (its certificate and key, no client
/// certificates asked) and the CA's path.
fn server_tls(dir: &Path) -> (Vec<String>, String) {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let ca = file("ca.crt");
    let args = ["--tls-cert-file", &file("server.crt"), "--tls-key-file", &file("server.key")]
        .into_iter()
        .chain(["--tls-ca-cert-file", &ca, "--tls-auth-clients", "no"])
        .map(str::to_owned)
        .collect();
    (args, ca)
}

/// The test's own TLS client of a server on a port, trusting the CA at `ca`.
fn tls_client(ca: &str) -> impl Fn(u16) -> redis::Client + Send + Sync + 'static {
    let root_cert = std::fs::read(ca).unwrap();
    move |port| {
        let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert.clone()) };
        redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}"), certificates).unwrap()
    }
}

/// Five requests of a limit of 5 admitted through Redis, the sixth refused
/// by it, and no Redis error.
fn five_then_refused(gov: &RedisGovernor, route: &SharedRoute) {
    for _ in 0..5 {
        let mut permit = gov.try_acquire(route, Usage::new(1, 1)).unwrap();
        assert!(!permit.from_fallback(), "{:?}", gov.health());
        gov.settle(&mut permit, Usage::new(1, 1)).unwrap();
    }
    assert!(gov.try_acquire(route, Usage::new(1, 1)).is_err(), "the sixth is refused by Redis");
    let health = gov.health();
    assert!(!health.degraded && health.redis_errors == 0, "{health:?}");
}

/// A Cluster whose nodes serve TLS only, to clients and to each other:
/// `cluster = true` with a `rediss://` url and the private CA.
#[test]
fn a_cluster_over_tls_admits_on_the_node_of_each_scope() {
    let dir = std::env::temp_dir().join(fresh_prefix("tls-cluster"));
    if !certificates(&dir) {
        return;
    }
    let (mut tls, ca) = server_tls(&dir);
    tls.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let client = tls_client(&ca);
    let Some(cluster) = PrivateCluster::start("tls-cluster", Listen::TlsOnly, &tls, client) else { return };
    let prefix = fresh_prefix("tls-cluster");
    let paths = cluster.one_scope_per_node(&prefix);
    let url = format!("rediss://127.0.0.1:{}", cluster.nodes[0].port);
    let gov = RedisGovernor::from_toml(&cluster_config(
        &url,
        &prefix,
        "exact",
        &paths,
        &requests_an_hour(5),
        &format!("tls_ca_file = \"{ca}\""),
    ))
    .unwrap();
    five_then_refused(&gov, &gov.route(&paths).unwrap());
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Redis behind Sentinel, all over TLS: master, replica (replicating over
/// TLS) and Sentinel serve TLS only. The governor asks the Sentinel over
/// TLS and reaches the master it names over TLS, verified against the
/// private CA; after a failover, the promoted replica the same way: 3 of 8
/// before, 5 after, each through Redis.
#[test]
fn sentinel_and_master_over_tls_are_followed_through_a_failover() {
    let dir = std::env::temp_dir().join(fresh_prefix("tls-sentinel"));
    if !certificates(&dir) {
        return;
    }
    let (mut tls, ca) = server_tls(&dir);
    tls.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let client = tls_client(&ca);
    let Some(sentinel) = PrivateSentinel::start_with("tls-sentinel", Listen::TlsOnly, &tls, client) else { return };
    let ca_line = format!("tls_ca_file = \"{ca}\"");
    let text = sentinel_config(&format!("rediss://{MASTER}"), &[sentinel.url()], &ca_line, "tls-sentinel", 8);
    let gov = RedisGovernor::from_toml(&text).unwrap();
    let route = gov.route(&["team"]).unwrap();
    let through_redis = |until: usize| {
        let mut admitted = 0;
        while admitted < until {
            let Ok(permit) = gov.try_acquire(&route, Usage::new(1, 1)) else { break };
            assert!(!permit.from_fallback(), "{:?}", gov.health());
            admitted += 1;
        }
        admitted
    };
    assert_eq!(through_redis(3), 3);
    assert!(sentinel.keys_on(&sentinel.master) > 0, "the state is on the master");
    sentinel.fail_over();
    assert_eq!(through_redis(usize::MAX), 5, "the 3 taken were replicated");
    let health = gov.health();
    assert!(!health.degraded && health.redis_errors == 0 && health.state_resets == 0, "{health:?}");
    assert!(sentinel.is_master(&sentinel.replica), "the promoted replica serves");
    drop(sentinel);
    let _ = std::fs::remove_dir_all(&dir);
}

fn config_error(text: &str) -> (String, String, String) {
    match RedisGovernor::from_toml(text) {
        Err(llmgov_redis::Error::InvalidConfig { field, value, reason }) => (field, value, reason),
        Err(other) => panic!("expected InvalidConfig, got {other}"),
        Ok(_) => panic!("accepted:\n{text}"),
    }
}

fn with_ca(url: &str, ca: &str) -> String {
    format!(
        r#"
        [scopes."p/shared"]
        limits = [{{ dimension = "requests", amount = 5, window = "1d" }}]
        [redis]
        url = "{url}"
        tls_ca_file = "{ca}"
        prefix = "p"
        expected_processes = 5
        [redis.scopes."p/shared"]
        mode = "exact"
        "#
    )
}

/// A CA file holding no certificate trusted nothing: every connection was
/// refused and the process ran on its safe share for good, the config
/// accepted. And a CA file beside a plain `redis://` URL named the URL.
#[test]
fn a_ca_file_without_a_certificate_or_without_rediss_is_a_config_error() {
    let dir = std::env::temp_dir().join(fresh_prefix("tls-bad-ca"));
    std::fs::create_dir_all(&dir).unwrap();
    let not_pem = dir.join("ca.der");
    std::fs::write(&not_pem, [0x30, 0x82, 0x01, 0x0a, 0x02]).unwrap();
    let not_pem = not_pem.to_string_lossy().into_owned();
    let (field, value, reason) = config_error(&with_ca("rediss://127.0.0.1:6379", &not_pem));
    assert_eq!((field.as_str(), value.as_str()), ("redis.tls_ca_file", not_pem.as_str()), "{reason}");
    assert!(reason.contains("no PEM certificate"), "{reason}");

    let (field, value, reason) = config_error(&with_ca("redis://127.0.0.1:6379", &not_pem));
    assert_eq!((field.as_str(), value.as_str()), ("redis.tls_ca_file", not_pem.as_str()), "{reason}");
    assert!(reason.contains("rediss://"), "{reason}");

    let missing = dir.join("missing.pem").to_string_lossy().into_owned();
    let (field, value, _) = config_error(&with_ca("rediss://127.0.0.1:6379", &missing));
    assert_eq!((field.as_str(), value.as_str()), ("redis.tls_ca_file", missing.as_str()));
    let _ = std::fs::remove_dir_all(&dir);
}
