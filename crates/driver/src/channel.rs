//! [`Channel`]: where a publication publishes and a subscription reads.

use crate::uri::{ChannelUri, UriError};

/// A channel in one of the forms every tool accepts:
///
/// * `ipc:NAME`: a shared-memory log on this host (NAME: letters, digits,
///   `-`, `_`, `.`).
/// * `udp://HOST:PORT[?key=value&...]`: reliable UDP unicast to HOST:PORT.
/// * `udp://GROUP:PORT?interface=ADDR[&...]`: reliable UDP multicast.
/// * `tcp://HOST:PORT[?key=value&...]`: the same protocol over a TCP
///   connection (the subscription listens, the publication connects, and
///   connects again when the connection breaks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// A shared-memory log; the full channel string (`ipc:NAME`) names it.
    Ipc(String),
    /// The reliable protocol over the network: UDP, or TCP (`uri.tcp`).
    Udp(ChannelUri),
}

impl std::str::FromStr for Channel {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, UriError> {
        if s.starts_with("ipc:") {
            Ok(Channel::Ipc(s.to_owned()))
        } else if s.starts_with("udp://") || s.starts_with("tcp://") {
            Ok(Channel::Udp(s.parse()?))
        } else {
            Err(UriError::Scheme(s.to_owned()))
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Channel::Ipc(name) => f.write_str(name),
            Channel::Udp(uri) => uri.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form_and_names_the_accepted_ones() {
        assert_eq!("ipc:md".parse::<Channel>().unwrap(), Channel::Ipc("ipc:md".into()));
        assert!(matches!("udp://127.0.0.1:4000?nak-delay=20us".parse(), Ok(Channel::Udp(_))));
        assert!(matches!("tcp://127.0.0.1:4000".parse(), Ok(Channel::Udp(u)) if u.tcp));
        let err = "http://127.0.0.1:1".parse::<Channel>().unwrap_err().to_string();
        assert!(err.contains("ipc:NAME") && err.contains("udp://HOST:PORT") && err.contains("tcp://"), "{err}");
        assert_eq!("ipc:md".parse::<Channel>().unwrap().to_string(), "ipc:md");
    }
}
