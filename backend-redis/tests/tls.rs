//! `rediss://` against a redis-server serving TLS only, with a CA made for
//! the test by openssl. Built and run with `--features tls` (make test-redis
//! does); without the feature this file compiles to nothing.

#![cfg(feature = "tls")]

mod common;

use std::path::Path;
use std::process::Command;

use common::{fresh_prefix, Listen, PrivateRedis, TIMEOUT};
use llmgov::Usage;
use llmgov_redis::RedisGovernor;

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
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let (cert, key, ca) = (file("server.crt"), file("server.key"), file("ca.crt"));
    let tls = ["--tls-cert-file", &cert, "--tls-key-file", &key, "--tls-ca-cert-file", &ca, "--tls-auth-clients", "no"];
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
    let route = gov.route(&["p/shared"]).unwrap();
    for _ in 0..5 {
        let mut permit = gov.try_acquire(&route, Usage::new(1, 1)).unwrap();
        assert!(!permit.from_fallback(), "{:?}", gov.health());
        gov.settle(&mut permit, Usage::new(1, 1)).unwrap();
    }
    assert!(gov.try_acquire(&route, Usage::new(1, 1)).is_err(), "the sixth is refused by Redis");
    let health = gov.health();
    assert!(!health.degraded && health.redis_errors == 0, "{health:?}");
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
