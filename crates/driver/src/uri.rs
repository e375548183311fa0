//! Channel URIs: `udp://host:port?key=value&...` and
//! `tcp://host:port?key=value&...`.
//!
//! A multicast address (224.0.0.0/4) makes a multicast channel (UDP only);
//! `interface` names the local address to join and send on. A `tcp://`
//! channel carries the same protocol over a TCP connection
//! (`tickwire_transport::TcpTransport`), point to point. Every key is listed in
//! [`KEYS`]; an unknown key or a bad value is an error that names it.

use crate::units::{parse_duration, parse_size};
use std::net::{Ipv4Addr, SocketAddrV4, ToSocketAddrs};
use std::time::Duration;

/// The keys a `udp://` URI accepts.
pub const KEYS: &[&str] = &[
    "interface",
    "mtu",
    "window",
    "retention",
    "max-message",
    "fc",
    "nak-delay",
    "nak-delay-max",
    "group-size",
    "nak-retry",
    "nak-retry-initial",
    "nak-retry-max",
    "linger",
    "heartbeat",
    "status-interval",
    "session-timeout",
    "receiver-timeout",
    "control-poll",
    "buffer",
    "receiver-id",
    "seed",
    "auth",
    "xdp",
    "xdp-mode",
    "xdp-checksum",
    "loss",
    "reorder",
    "duplicate",
    "send-data-loss",
    "send-data-reorder",
    "send-data-duplicate",
    "send-data-drop",
    "send-control-loss",
    "send-control-reorder",
    "send-control-duplicate",
    "recv-data-loss",
    "recv-data-reorder",
    "recv-data-duplicate",
    "recv-data-drop",
    "recv-control-loss",
    "recv-control-reorder",
    "recv-control-duplicate",
];

/// Why a URI is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// Not `udp://host:port[?...]` or `tcp://host:port[?...]`.
    #[error("not a network channel: {0:?} (expected udp://host:port?key=value&... or tcp://host:port?...)")]
    Syntax(String),
    /// The host does not resolve to an IPv4 address.
    #[error("cannot resolve {0:?} to an IPv4 address")]
    Resolve(String),
    /// Neither `ipc:`, `udp://` nor `tcp://`.
    #[error(
        "unknown channel {0:?}: expected ipc:NAME, udp://HOST:PORT[?key=value&...], udp://GROUP:PORT?interface=ADDR \
         or tcp://HOST:PORT[?key=value&...]"
    )]
    Scheme(String),
    /// A key not in [`KEYS`].
    #[error("unknown channel parameter {0:?}")]
    UnknownKey(String),
    /// A value that does not parse.
    #[error("bad value {value:?} for {key}: {why}")]
    Value {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What was expected.
        why: &'static str,
    },
}

/// A parsed `udp://` or `tcp://` channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelUri {
    /// The endpoint: the receiver's address, or the multicast group and port.
    pub endpoint: SocketAddrV4,
    /// `tcp://`: the protocol runs over a TCP connection instead of datagrams.
    pub tcp: bool,
    params: Vec<(String, String)>,
}

impl std::str::FromStr for ChannelUri {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, UriError> {
        let (tcp, rest) = match (s.strip_prefix("udp://"), s.strip_prefix("tcp://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err(UriError::Syntax(s.to_owned())),
        };
        let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
        if !hostport.contains(':') {
            return Err(UriError::Syntax(s.to_owned()));
        }
        let endpoint = hostport
            .to_socket_addrs()
            .map_err(|_| UriError::Resolve(hostport.to_owned()))?
            .find_map(|a| match a {
                std::net::SocketAddr::V4(v4) => Some(v4),
                std::net::SocketAddr::V6(_) => None,
            })
            .ok_or_else(|| UriError::Resolve(hostport.to_owned()))?;
        let mut params = Vec::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if !KEYS.contains(&k) {
                return Err(UriError::UnknownKey(k.to_owned()));
            }
            params.push((k.to_owned(), v.to_owned()));
        }
        let uri = Self { endpoint, tcp, params };
        uri.interface()?;
        if tcp && endpoint.ip().is_multicast() {
            return Err(UriError::Value {
                key: "host".into(),
                value: endpoint.ip().to_string(),
                why: "a tcp:// channel is point to point: not a multicast group",
            });
        }
        Ok(uri)
    }
}

impl std::fmt::Display for ChannelUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", if self.tcp { "tcp" } else { "udp" }, self.endpoint)?;
        for (i, (k, v)) in self.params.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

impl ChannelUri {
    /// The endpoint is a multicast group.
    pub fn is_multicast(&self) -> bool {
        !self.tcp && self.endpoint.ip().is_multicast()
    }

    /// The raw value of `key`, if set (the last one wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Sets (or replaces) `key`.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        self.params.retain(|(k, _)| k != key);
        self.params.push((key.to_owned(), value.to_string()));
    }

    fn bad(&self, key: &str, why: &'static str) -> UriError {
        UriError::Value { key: key.to_owned(), value: self.get(key).unwrap_or("").to_owned(), why }
    }

    /// `interface`, default 0.0.0.0.
    ///
    /// # Errors
    /// [`UriError::Value`] if it is not an IPv4 address.
    pub fn interface(&self) -> Result<Ipv4Addr, UriError> {
        self.get("interface")
            .map_or(Ok(Ipv4Addr::UNSPECIFIED), |v| v.parse().map_err(|_| self.bad("interface", "an IPv4 address")))
    }

    /// A size such as `1408`, `64k`, `16MiB` (binary multiples).
    ///
    /// # Errors
    /// [`UriError::Value`].
    pub fn size(&self, key: &str, default: usize) -> Result<usize, UriError> {
        let Some(v) = self.get(key) else { return Ok(default) };
        parse_size(v).map_err(|_| self.bad(key, "a size such as 1408, 64k or 16MiB"))
    }

    /// A duration such as `20us`, `1ms`, `2s`, `500ns`.
    ///
    /// # Errors
    /// [`UriError::Value`].
    pub fn duration(&self, key: &str, default: Duration) -> Result<Duration, UriError> {
        let Some(v) = self.get(key) else { return Ok(default) };
        parse_duration(v).map_err(|_| self.bad(key, "a duration such as 20us, 1ms or 2s"))
    }

    /// A probability in `[0, 1]`.
    ///
    /// # Errors
    /// [`UriError::Value`].
    pub fn probability(&self, key: &str) -> Result<f64, UriError> {
        let Some(v) = self.get(key) else { return Ok(0.0) };
        v.parse::<f64>()
            .ok()
            .filter(|p| (0.0..=1.0).contains(p))
            .ok_or_else(|| self.bad(key, "a probability in [0, 1]"))
    }

    /// An unsigned integer.
    ///
    /// # Errors
    /// [`UriError::Value`].
    pub fn number(&self, key: &str, default: u64) -> Result<u64, UriError> {
        let Some(v) = self.get(key) else { return Ok(default) };
        v.parse().map_err(|_| self.bad(key, "an unsigned integer"))
    }

    /// A position range `from-to` (from < to).
    ///
    /// # Errors
    /// [`UriError::Value`].
    pub fn range(&self, key: &str) -> Result<Option<(u64, u64)>, UriError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let parsed = v.split_once('-').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
        match parsed {
            Some((a, b)) if a < b => Ok(Some((a, b))),
            _ => Err(self.bad(key, "a position range FROM-TO with FROM < TO")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_with_the_key_named() {
        let u: ChannelUri = "udp://239.1.2.3:4000?interface=10.0.0.1&window=2MiB&nak-delay=20us".parse().unwrap();
        assert!(u.is_multicast());
        assert_eq!(u.interface().unwrap(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(u.size("window", 0).unwrap(), 2 << 20);
        assert_eq!(u.duration("nak-delay", Duration::ZERO).unwrap(), Duration::from_micros(20));
        assert_eq!(u.to_string().parse::<ChannelUri>().unwrap(), u);
        assert!(
            matches!("udp://127.0.0.1:1?windw=1".parse::<ChannelUri>(), Err(UriError::UnknownKey(k)) if k == "windw")
        );
        assert!(matches!("http://127.0.0.1:1".parse::<ChannelUri>(), Err(UriError::Syntax(_))));
        let t: ChannelUri = "tcp://127.0.0.1:4000?window=1MiB".parse().unwrap();
        assert!(t.tcp && !t.is_multicast());
        assert_eq!(t.to_string(), "tcp://127.0.0.1:4000?window=1MiB");
        let e = "tcp://239.1.2.3:4000".parse::<ChannelUri>().unwrap_err().to_string();
        assert!(e.contains("point to point"), "{e}");
        assert!(matches!("udp://127.0.0.1".parse::<ChannelUri>(), Err(UriError::Syntax(_))));
        let bad: ChannelUri = "udp://127.0.0.1:1?loss=1.5&mtu=12q".parse().unwrap();
        assert!(bad.probability("loss").is_err());
        assert!(matches!(bad.size("mtu", 0), Err(UriError::Value { key, .. }) if key == "mtu"));
        assert!("udp://127.0.0.1:1?interface=eth0".parse::<ChannelUri>().is_err());
    }
}
