//! Who a node is to Redis, and whom it trusts: ACL users and passwords, TLS, and the CA a
//! server's certificate must chain to.
//!
//! A URL says some of it (`rediss://`, `user:password@`), but not all: the master a
//! Sentinel names has no URL of its own, so its user and TLS must come from elsewhere,
//! and the sentinels themselves often have a user (or `requirepass`) of their own. A
//! password kept out of a URL is also kept out of every place that URL is shown.
//!
//! The rules, the same for the three kinds of target:
//! - TLS is used everywhere or nowhere: when [`RedisAccess::tls`] is set or any URL given
//!   is `rediss://`, every server, sentinel and the master they name is reached over TLS
//!   (a deployment that encrypts its sentinels and not its master is not one to support).
//! - The server certificate must chain to [`RedisAccess::ca_pem`] when given, else to the
//!   system's roots, and name the host connected to; nothing turns that check off.
//! - The data servers' user (the single server, the master, every Cluster node) is
//!   [`RedisAccess::username`]/`password` when set, else the URL's; the sentinels' is
//!   `sentinel_username`/`sentinel_password` when set, else their URLs'.

use crate::RedisTarget;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
    TlsCertificates, TlsMode,
};
use std::fmt;
use std::time::Duration;

/// Credentials and trust for every connection to Redis, beyond what the URLs hold.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisAccess {
    /// The ACL user of the servers holding the data: the single server, the master the
    /// sentinels name, every Cluster node. Wins over a user in the URLs.
    pub username: Option<String>,
    /// The password of `username` (or the servers' `requirepass`).
    pub password: Option<String>,
    /// The sentinels' own user (or, with no username, their `requirepass`): a sentinel is
    /// a separate server with separate ACLs.
    pub sentinel_username: Option<String>,
    /// The password of `sentinel_username` (or the sentinels' `requirepass`).
    pub sentinel_password: Option<String>,
    /// Reach every Redis server over TLS, as a `rediss://` URL does.
    pub tls: bool,
    /// PEM certificates a server's certificate must chain to, instead of the system's
    /// roots: the CA of a private Redis deployment.
    pub ca_pem: Option<Vec<u8>>,
}

/// Passwords are never printed; the CA is public but long.
impl fmt::Debug for RedisAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("RedisAccess")
            .field("username", &self.username)
            .field("password", &secret(&self.password))
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &secret(&self.sentinel_password))
            .field("tls", &self.tls)
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .finish()
    }
}

fn is_tls(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

/// The same address over TLS, checked against the roots (never `insecure`).
fn over_tls(addr: &ConnectionAddr) -> RedisResult<ConnectionAddr> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Ok(ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            })
        }
        _ => Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "TLS is asked for, but this address cannot have it (a Unix socket)",
        ))),
    }
}

impl RedisAccess {
    /// Whether connections to `target` use TLS: see the module's rules.
    pub fn uses_tls(&self, target: &RedisTarget) -> bool {
        match target {
            RedisTarget::Url(url) => self.tls_for([url].into_iter()),
            RedisTarget::Sentinel { sentinels, .. } => self.tls_for(sentinels.iter()),
            RedisTarget::Cluster { nodes } => self.tls_for(nodes.iter()),
        }
    }

    /// Whether connections for these URLs use TLS: see the module's rules.
    pub(crate) fn tls_for<'a>(&self, mut urls: impl Iterator<Item = &'a String>) -> bool {
        self.tls || urls.any(|url| is_tls(url))
    }

    fn certificates(&self) -> Option<TlsCertificates> {
        self.ca_pem.as_ref().map(|pem| TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        })
    }

    /// A data server's connection info: the URL's, upgraded to TLS when `tls`, with this
    /// access's user.
    fn server_info(&self, url: &str, tls: bool) -> RedisResult<ConnectionInfo> {
        let mut info = url.into_connection_info()?;
        if tls {
            info = info.clone().set_addr(over_tls(info.addr())?);
        }
        let mut redis = info.redis_settings().clone();
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        Ok(info.set_redis_settings(redis))
    }

    /// A client for one data server (the single one, or one node of a Cluster).
    pub(crate) fn server_client(&self, url: &str, tls: bool) -> RedisResult<Client> {
        let info = self.server_info(url, tls)?;
        match self.certificates() {
            Some(certificates) if tls => Client::build_with_tls(info, certificates),
            _ => Client::open(info),
        }
    }

    /// A client that asks `sentinels` for `master` and connects to it as this access
    /// says: the sentinels with their user, the master with the data servers' user.
    pub(crate) fn sentinel_client(
        &self,
        sentinels: &[String],
        master: &str,
    ) -> RedisResult<SentinelClient> {
        let tls = self.tls_for(sentinels.iter());
        let infos = sentinels
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()?;
        let addrs = infos
            .iter()
            .map(|info| {
                if tls {
                    over_tls(info.addr())
                } else {
                    Ok(info.addr().clone())
                }
            })
            .collect::<RedisResult<Vec<_>>>()?;
        let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)?;
        let from_urls = infos.iter().map(|i| i.redis_settings());
        let sentinel_username = self.sentinel_username.clone().or_else(|| {
            from_urls
                .clone()
                .find_map(|r| r.username().map(String::from))
        });
        let sentinel_password = self.sentinel_password.clone().or_else(|| {
            from_urls
                .clone()
                .find_map(|r| r.password().map(String::from))
        });
        if let Some(username) = sentinel_username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let Some(username) = &self.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if tls {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
            if let Some(certificates) = self.certificates() {
                builder = builder
                    .set_client_to_sentinel_certificates(certificates.clone())
                    .set_client_to_redis_certificates(certificates);
            }
        }
        builder.build()
    }

    /// A Cluster client: every node with the data servers' user, over TLS when asked.
    /// `timeouts` are (command, connect).
    pub(crate) fn cluster_client(
        &self,
        nodes: &[String],
        timeouts: (Duration, Duration),
    ) -> RedisResult<ClusterClient> {
        let tls = self.tls_for(nodes.iter());
        let infos = nodes
            .iter()
            .map(|url| self.server_info(url, tls))
            .collect::<RedisResult<Vec<_>>>()?;
        let (command, connect) = timeouts;
        let mut builder = ClusterClientBuilder::new(infos)
            .response_timeout(command)
            .connection_timeout(connect);
        if tls && let Some(certificates) = self.certificates() {
            builder = builder.certs(certificates);
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_printed() {
        let access = RedisAccess {
            username: Some("baton".into()),
            password: Some("s3cret".into()),
            sentinel_password: Some("s3ntinel".into()),
            ..RedisAccess::default()
        };
        let shown = format!("{access:?}");
        assert!(shown.contains("baton"), "{shown}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("s3ntinel"),
            "{shown}"
        );
    }

    #[test]
    fn the_settings_user_wins_over_the_urls() {
        let access = RedisAccess {
            username: Some("baton".into()),
            password: Some("right".into()),
            ..RedisAccess::default()
        };
        let info = access
            .server_info("redis://other:wrong@10.0.0.1:6379", false)
            .unwrap();
        assert_eq!(info.redis_settings().username(), Some("baton"));
        assert_eq!(info.redis_settings().password(), Some("right"));
        let plain = RedisAccess::default()
            .server_info("redis://other:pw@10.0.0.1:6379", false)
            .unwrap();
        assert_eq!(plain.redis_settings().username(), Some("other"));
    }

    #[test]
    fn tls_anywhere_is_tls_everywhere() {
        let urls = ["redis://a:1".to_string(), "rediss://b:2".to_string()];
        assert!(RedisAccess::default().tls_for(urls.iter()));
        assert!(!RedisAccess::default().tls_for(urls[..1].iter()));
        let tls = RedisAccess {
            tls: true,
            ..RedisAccess::default()
        };
        let info = tls.server_info("redis://10.0.0.1:6379", true).unwrap();
        assert!(
            matches!(
                info.addr(),
                ConnectionAddr::TcpTls {
                    insecure: false,
                    ..
                }
            ),
            "{:?}",
            info.addr()
        );
    }
}
