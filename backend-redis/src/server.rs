//! Where Redis is: one server, a Redis Cluster reached through any of its
//! nodes, or a server behind Sentinel; and a connection to any of them.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, Cmd, Connection, ConnectionLike, ErrorKind, IntoConnectionInfo, RedisResult, Value};

use crate::errors::{Error, Result};
use crate::sentinel::Sentinel;
use crate::settings::{redact, Settings};

/// The Redis the governor talks to.
pub(crate) enum Server {
    Single(Client),
    /// Every call goes to the node serving its scope's hash slot.
    Cluster(ClusterClient),
    /// Each connection goes to the master the Sentinels name.
    Sentinel(Sentinel),
}

/// One connection: to the one server, or to every node of the Cluster.
pub(crate) enum Link {
    Single(Connection),
    /// Boxed: it is four times a `Connection`, and the pool moves links.
    Cluster(Box<ClusterConnection>),
}

impl Server {
    /// The client for the settings' url: plain, or TLS with the configured CA.
    pub fn open(settings: &Settings) -> Result<Server> {
        let url_error = |e: redis::RedisError| Error::config("redis.url", redact(&settings.url), e.to_string());
        let url = settings.url.as_str();
        if !settings.sentinels.is_empty() {
            return Sentinel::new(settings).map(Server::Sentinel);
        }
        if settings.cluster {
            // A Cluster serves database 0 only: each node would refuse the
            // SELECT, and the process would stay on its safe share.
            let info = url.into_connection_info().map_err(url_error)?;
            if info.redis_settings().db() != 0 {
                return Err(Error::config("redis.url", redact(url), "a Redis Cluster has database 0 only"));
            }
            // No retries inside the client: it would send a call again after
            // a timeout or a dropped connection, and a settle run twice
            // refunds twice. `Store::with` retries what is safe to retry.
            let builder = ClusterClientBuilder::new([url]).retries(0);
            let builder = match root_certificate(settings)? {
                #[cfg(feature = "tls")]
                Some(root_cert) => {
                    builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) })
                }
                _ => builder,
            };
            return builder.build().map(Server::Cluster).map_err(url_error);
        }
        match root_certificate(settings)? {
            #[cfg(feature = "tls")]
            Some(root_cert) => {
                let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
                Client::build_with_tls(url, certificates).map(Server::Single).map_err(url_error)
            }
            _ => Client::open(url).map(Server::Single).map_err(url_error),
        }
    }

    /// A new connection whose connect, reads and writes each give up after
    /// `timeout`. A Cluster connection learns which node serves which slot
    /// as it connects.
    pub fn connect(&self, timeout: Duration) -> RedisResult<Link> {
        match self {
            Server::Single(client) => {
                let connection = client.get_connection_with_timeout(timeout)?;
                connection.set_read_timeout(Some(timeout))?;
                connection.set_write_timeout(Some(timeout))?;
                Ok(Link::Single(connection))
            }
            Server::Sentinel(sentinel) => sentinel.connect(timeout).map(Link::Single),
            Server::Cluster(client) => {
                let config =
                    redis::cluster::ClusterConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
                let connection = client.get_connection_with_config(config)?;
                connection.set_read_timeout(Some(timeout))?;
                connection.set_write_timeout(Some(timeout))?;
                Ok(Link::Cluster(Box::new(connection)))
            }
        }
    }
}

impl Link {
    /// What the scripts run on.
    pub fn as_connection(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Link::Single(connection) => connection,
            Link::Cluster(connection) => &mut **connection,
        }
    }

    /// Where a call a Cluster node answered `ASK` goes again: to `node`
    /// (`host:port`), the slot's importing node. `None` on one server or
    /// for an address that is not `host:port`.
    pub fn asking(&mut self, node: &str) -> Option<Asking<'_>> {
        let Link::Cluster(connection) = self else { return None };
        let (host, port) = node.rsplit_once(':')?;
        let port = port.parse().ok()?;
        let node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.to_owned(), port });
        Some(Asking { connection, node })
    }
}

/// A Cluster link that sends each command to one node, right after
/// `ASKING` on the same connection: while a slot migrates, the keys its
/// old node no longer holds are served by the new one only so asked.
pub(crate) struct Asking<'a> {
    connection: &'a mut ClusterConnection,
    node: RoutingInfo,
}

impl ConnectionLike for Asking<'_> {
    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.connection.route_command(&redis::cmd("ASKING"), self.node.clone())?.extract_error()?;
        self.connection.route_command(cmd, self.node.clone())
    }

    // Scripts send commands (EVALSHA, SCRIPT LOAD), never packed bytes,
    // which carry no command to route.
    fn req_packed_command(&mut self, _: &[u8]) -> RedisResult<Value> {
        Err((ErrorKind::Client, "a call redirected by ASK is sent as commands").into())
    }

    fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
        Err((ErrorKind::Client, "a call redirected by ASK is sent as commands").into())
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.connection.check_connection()
    }

    fn is_open(&self) -> bool {
        self.connection.is_open()
    }
}

/// The PEM of `redis.tls_ca_file`, checked to hold a certificate, if set.
pub(crate) fn root_certificate(settings: &Settings) -> Result<Option<Vec<u8>>> {
    let Some(path) = &settings.tls_ca_file else { return Ok(None) };
    let root_cert = std::fs::read(path).map_err(|e| Error::config("redis.tls_ca_file", path, e.to_string()))?;
    // A file with no certificate (DER, a key, the wrong file) would trust
    // nothing: every connection refused, the process on its safe share for good.
    #[cfg(feature = "tls")]
    {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let certificates = CertificateDer::pem_slice_iter(&root_cert).collect::<std::result::Result<Vec<_>, _>>();
        if !certificates.is_ok_and(|found| !found.is_empty()) {
            return Err(Error::config(
                "redis.tls_ca_file",
                path,
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            ));
        }
    }
    Ok(Some(root_cert))
}
