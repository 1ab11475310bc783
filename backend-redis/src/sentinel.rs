//! A Redis server behind Sentinel: each new connection goes to the master
//! that the first Sentinel to answer names, so that after a failover the
//! next connection finds the promoted replica.
//!
//! Written here rather than taken from the redis crate's `SentinelClient`,
//! which asks the Sentinels and the master without a timeout: one Sentinel
//! host that drops packets would hold every reconnect for the operating
//! system's TCP timeout (minutes), where each step here gives up after
//! `redis.timeout`.
//!
//! Sentinels and master may each be reached over TLS (`rediss://`), all of
//! them verified against `redis.tls_ca_file` (or the system's roots).

use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, RedisResult, Value};

use crate::errors::{Error, Result};
use crate::server::root_certificate;
use crate::settings::{redact, Settings};

pub(crate) struct Sentinel {
    /// The Sentinels, asked in this order, each with its TLS parameters.
    sentinels: Vec<ConnectionInfo>,
    /// The name of the master they monitor: `redis.url`'s host.
    master: String,
    /// `redis.url`: the master's user, password, database and TLS
    /// parameters (its address is replaced by the one a Sentinel names).
    master_info: ConnectionInfo,
}

impl Sentinel {
    /// The Sentinels of the settings (`redis.sentinels`, checked there to be
    /// `redis://` or `rediss://` urls), watching the master `redis.url` names.
    pub fn new(settings: &Settings) -> Result<Self> {
        let root_cert = root_certificate(settings)?;
        let url_error = |e: RedisError| Error::config("redis.url", redact(&settings.url), e.to_string());
        let master_info = with_tls(settings.url.as_str(), root_cert.as_deref()).map_err(url_error)?;
        let (ConnectionAddr::Tcp(master, _) | ConnectionAddr::TcpTls { host: master, .. }) = master_info.addr() else {
            return Err(Error::config("redis.url", redact(&settings.url), "names the master by its name, over TCP"));
        };
        let master = master.clone();
        let sentinels = settings.sentinels.iter().enumerate().map(|(i, url)| {
            let field = format!("redis.sentinels[{i}]");
            let reason = |e: RedisError| format!("not a Sentinel address, redis[s]://[:password@]host:port ({e})");
            with_tls(url, root_cert.as_deref()).map_err(|e| Error::config(field, redact(url), reason(e)))
        });
        Ok(Sentinel { sentinels: sentinels.collect::<Result<_>>()?, master, master_info })
    }

    /// A connection to the master, whose connect, reads and writes each
    /// give up after `timeout`: the first Sentinel that answers names it,
    /// and it must say it is the master (not a replica being promoted, or a
    /// demoted master not yet told). Otherwise the last Sentinel's error.
    pub fn connect(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        let mut last = RedisError::from((ErrorKind::Io, "no Sentinel configured"));
        for sentinel in &self.sentinels {
            match self.master_from(sentinel, timeout) {
                Ok(connection) => return Ok(connection),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    fn master_from(&self, sentinel: &ConnectionInfo, timeout: Duration) -> RedisResult<redis::Connection> {
        let mut asked = connect(sentinel.clone(), timeout)?;
        let address: Option<(String, u16)> =
            redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(&self.master).query(&mut asked)?;
        let Some((host, port)) = address else {
            let detail = format!("the Sentinel at {} monitors no master named {:?}", sentinel.addr(), self.master);
            return Err(RedisError::from((ErrorKind::Client, "unknown master", detail)));
        };
        let address = match self.master_info.addr() {
            ConnectionAddr::TcpTls { insecure, tls_params, .. } => {
                ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: tls_params.clone() }
            }
            _ => ConnectionAddr::Tcp(host, port),
        };
        let mut master = connect(self.master_info.clone().set_addr(address), timeout)?;
        let role: Vec<Value> = redis::cmd("ROLE").query(&mut master)?;
        match role.first() {
            Some(Value::BulkString(role)) if role == b"master" => Ok(master),
            _ => {
                let detail = format!("the server the Sentinel at {} names is not the master yet", sentinel.addr());
                Err(RedisError::from((ErrorKind::Client, "failover in progress", detail)))
            }
        }
    }
}

/// `url`'s connection info; for a `rediss://` url, with the TLS parameters
/// of `root_cert`, parsed once here rather than at each connection.
fn with_tls(url: &str, root_cert: Option<&[u8]>) -> RedisResult<ConnectionInfo> {
    match root_cert {
        #[cfg(feature = "tls")]
        Some(root_cert) if url.starts_with("rediss://") => {
            let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert.to_vec()) };
            Ok(Client::build_with_tls(url, certificates)?.get_connection_info().clone())
        }
        _ => url.into_connection_info(),
    }
}

/// A connection to `info` whose connect, reads and writes each give up after `timeout`.
fn connect(info: ConnectionInfo, timeout: Duration) -> RedisResult<redis::Connection> {
    let connection = Client::open(info)?.get_connection_with_timeout(timeout)?;
    connection.set_read_timeout(Some(timeout))?;
    connection.set_write_timeout(Some(timeout))?;
    Ok(connection)
}
