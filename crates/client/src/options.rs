//! How a client connects: where the router is ([`RouterUri`]) and the
//! client's settings ([`ClientOptions`]).

use crate::ClientError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tickwire_transport::link::Batching;
use tickwire_wire::client::SlowConsumer;

/// Where the router is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouterUri {
    /// Over shared memory, the router serving [`ClientOptions::dir`].
    Ipc,
    /// Over TCP.
    Tcp(SocketAddr),
    /// Over TLS on TCP (`tls://HOST:PORT`): the router's certificate must
    /// name `host` and chain to [`ClientOptions::tls_ca`].
    Tls {
        /// Where.
        addr: SocketAddr,
        /// The name the router's certificate must hold.
        host: String,
    },
}

impl std::str::FromStr for RouterUri {
    type Err = ClientError;
    fn from_str(s: &str) -> Result<Self, ClientError> {
        if s == "ipc" {
            return Ok(RouterUri::Ipc);
        }
        let bad = || ClientError::Uri(s.into());
        let (tls, rest) = match (s.strip_prefix("tcp://"), s.strip_prefix("tls://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err(bad()),
        };
        let addr = tickwire_transport::tcp::resolve(rest).ok_or_else(bad)?;
        if !tls {
            return Ok(RouterUri::Tcp(addr));
        }
        let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
        Ok(RouterUri::Tls { addr, host: host.to_owned() })
    }
}

impl std::fmt::Display for RouterUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouterUri::Ipc => f.write_str("ipc"),
            RouterUri::Tcp(a) => write!(f, "tcp://{a}"),
            RouterUri::Tls { addr, host } => write!(f, "tls://{host}:{}", addr.port()),
        }
    }
}

/// How a client connects. Its `Debug` shows `password` as `"***"`.
#[derive(Clone)]
pub struct ClientOptions {
    /// Sent in HELLO; the router shows it in its logs and counters.
    pub name: String,
    /// The router's directory (shared memory).
    pub dir: PathBuf,
    /// Ring bytes of this client's log into the router (shared memory).
    pub log_bytes: usize,
    /// How long to wait between connection attempts.
    pub reconnect_interval: Duration,
    /// How long a connection may wait for the router's WELCOME after
    /// HELLO (a password check included) before it is given up and tried
    /// again.
    pub welcome_timeout: Duration,
    /// Bytes a TCP client buffers before `publish` says `BackPressured`.
    pub tcp_write_limit: usize,
    /// When a TCP client writes what it publishes
    /// ([`Batching::SMART`], the default: a message on an idle link at
    /// once, messages close behind a write together, within 10 µs (up to
    /// 40 µs while the stream is dense);
    /// [`Batching::EVERY_FRAME`]: one write per message). Held messages go
    /// with the next publish or [`crate::Client::poll`] after the window,
    /// or at once with [`crate::Client::flush`], `park` or `close`.
    pub batching: Batching,
    /// Largest frame accepted from the router (TCP).
    pub max_frame: usize,
    /// `tls://`: the certificates (PEM) the router's must chain to.
    pub tls_ca: Option<PathBuf>,
    /// `tls://` to a router that asks for client certificates (mutual TLS,
    /// its `[router.tls] client_ca`): this client's certificate chain
    /// (PEM), with [`ClientOptions::tls_key`]. The router logs the client
    /// in as the user the certificate names (its subject CN, else its
    /// first DNS or e-mail SAN), without a password.
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of [`ClientOptions::tls_cert`], readable by
    /// its owner alone (mode 600).
    pub tls_key: Option<PathBuf>,
    /// The user to connect as, on a router with users (with `password`).
    /// Over plain TCP the password crosses the network in clear: use
    /// `tls://` off the host.
    pub user: Option<String>,
    /// The user's password.
    pub password: Option<String>,
    /// The slow-consumer policy to ask the router for (`None`: the
    /// router's). A policy the router's config gives this client's user
    /// wins.
    pub slow_consumer: Option<SlowConsumer>,
    /// Whether this client's own publishes reach its own subscriptions
    /// (true, the default; false asks the router not to deliver them, as
    /// NATS's `echo: false`).
    pub echo: bool,
    /// Guaranteed publishes that may await acknowledgement at once
    /// ([`crate::Client::publish_guaranteed`]).
    pub guaranteed_window: usize,
    /// Topic patterns whose messages [`crate::Client::publish`] sends guaranteed
    /// (as [`crate::Client::publish_guaranteed`] does).
    pub guaranteed_topics: Vec<String>,
    /// Routers a cluster's router tells of in WELCOME (those of this
    /// client's scheme, `tcp://` or `tls://`) join the list this client
    /// tries after a lost connection, as NATS clients add the servers
    /// they discover: a client given one router of a cluster fails over to
    /// the others (true, the default; false keeps to the routers given).
    pub discover_routers: bool,
}

/// Every field but the password, which is `Some("***")` if there is one:
/// options are logged and printed in panics, a password must not be.
impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured: a field added later must be added here too.
        let Self {
            name,
            dir,
            log_bytes,
            reconnect_interval,
            welcome_timeout,
            tcp_write_limit,
            batching,
            max_frame,
            tls_ca,
            tls_cert,
            tls_key,
            user,
            password,
            slow_consumer,
            echo,
            guaranteed_window,
            guaranteed_topics,
            discover_routers,
        } = self;
        f.debug_struct("ClientOptions")
            .field("name", name)
            .field("dir", dir)
            .field("log_bytes", log_bytes)
            .field("reconnect_interval", reconnect_interval)
            .field("welcome_timeout", welcome_timeout)
            .field("tcp_write_limit", tcp_write_limit)
            .field("batching", batching)
            .field("max_frame", max_frame)
            .field("tls_ca", tls_ca)
            .field("tls_cert", tls_cert)
            .field("tls_key", tls_key)
            .field("user", user)
            .field("password", &password.as_ref().map(|_| "***"))
            .field("slow_consumer", slow_consumer)
            .field("echo", echo)
            .field("guaranteed_window", guaranteed_window)
            .field("guaranteed_topics", guaranteed_topics)
            .field("discover_routers", discover_routers)
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            name: format!("pid-{}", std::process::id()),
            dir: tickwire_shm::default_dir(),
            log_bytes: 1 << 20,
            reconnect_interval: Duration::from_millis(100),
            welcome_timeout: Duration::from_secs(10),
            tcp_write_limit: 4 << 20,
            batching: Batching::SMART,
            max_frame: (1 << 20) + 512,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            user: None,
            password: None,
            slow_consumer: None,
            echo: true,
            guaranteed_window: 8192,
            guaranteed_topics: Vec::new(),
            discover_routers: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44 item 5: options are printed (`{:?}`, panics, logs); the
    /// password is not.
    #[test]
    fn debug_of_options_does_not_show_the_password() {
        let opts = ClientOptions {
            user: Some("desk".into()),
            password: Some("hunter2-s3cret".into()),
            ..ClientOptions::default()
        };
        for shown in [format!("{opts:?}"), format!("{opts:#?}")] {
            assert!(!shown.contains("hunter2") && shown.contains("\"***\"") && shown.contains("desk"), "{shown}");
        }
        let none = format!("{:?}", ClientOptions::default());
        assert!(none.contains("password: None"), "{none}");
    }
}
