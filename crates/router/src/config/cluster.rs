//! `[router.cluster]`: the router cluster this router is a member of (see
//! [`crate::cluster`]).

use super::ConfigError;
use crate::cluster::ClusterSettings;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `[router.cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterTable {
    /// The cluster's name: links with routers of another are refused.
    pub name: String,
    /// Where this router takes links from the others, `tcp://HOST:PORT`.
    pub listen: String,
    /// What the others are told to dial (`HOST:PORT`); empty: `listen`,
    /// which must then not be `0.0.0.0`.
    pub advertise: String,
    /// Where this router's clients connect, `tcp://HOST:PORT` or
    /// `tls://HOST:PORT`, and NATS clients `nats://HOST:PORT`, told to the
    /// other routers' clients so that a client given one router can fail
    /// over to the others; empty: its TCP and NATS listeners, those not on
    /// `0.0.0.0`.
    pub client_advertise: Vec<String>,
    /// Routers to dial at start, `tcp://HOST:PORT` (one is enough: the
    /// rest are learned from it).
    pub peers: Vec<String>,
    /// A file holding the cluster's shared secret, its owner's alone
    /// (mode 600): every router of the cluster proves it holds the same.
    pub secret_file: PathBuf,
    /// Heartbeats on an idle link; a link silent for twice this is
    /// dropped and dialed again.
    pub heartbeat: String,
    /// A router down this long is forgotten: what it wanted is withdrawn
    /// (what its subscribers miss after is not counted), and one only
    /// learned of from another router is no longer dialed.
    pub forget_after: String,
    /// TLS on the links between routers (none: plain TCP).
    pub tls: Option<ClusterTlsFiles>,
    /// Where the cluster's agent runs: `shared`, on the routing agent's
    /// thread when there is one routing agent (its own thread with more);
    /// `own`, always on a thread of its own; `auto` (the default),
    /// `shared` when the threads sleep when idle (`idle` backoff, park or
    /// wait) and the links are plain TCP, else `own`.
    pub thread: String,
}

/// `[router.cluster.tls]`: links between routers speak TLS, and each end
/// shows a certificate the other checks against `ca`; the certificate
/// must name its router (subject CN, else its first DNS or e-mail SAN, =
/// the router's own `[router] name`), so a router cannot pass for another.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterTlsFiles {
    /// This router's certificate chain (PEM), for both ends of a link:
    /// extended key usages serverAuth and clientAuth, or none.
    pub cert: PathBuf,
    /// Its private key (PEM), its owner's alone.
    pub key: PathBuf,
    /// The CA (PEM) every router's certificate must chain to: better one
    /// of the cluster's own than the one that signs clients' certificates.
    pub ca: PathBuf,
}

impl Default for ClusterTable {
    fn default() -> Self {
        Self {
            name: String::new(),
            listen: String::new(),
            advertise: String::new(),
            client_advertise: Vec::new(),
            peers: Vec::new(),
            secret_file: PathBuf::new(),
            heartbeat: "1s".into(),
            forget_after: "60s".into(),
            tls: None,
            thread: "auto".into(),
        }
    }
}

/// `tcp://HOST:PORT` or `HOST:PORT` without its scheme.
fn host_port(uri: &str) -> &str {
    uri.strip_prefix("tcp://").unwrap_or(uri)
}

impl ClusterTable {
    /// The settings, the secret read now, for the router named `router`.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the key.
    /// `max_frame` is the router's `limits.max_frame`.
    pub fn to_settings(&self, router: &str, max_frame: usize) -> Result<ClusterSettings, ConfigError> {
        let bad = |key: &'static str, value: &dyn std::fmt::Display, why: &'static str| ConfigError::Value {
            key,
            value: value.to_string(),
            why,
        };
        if self.name.is_empty() || self.name.len() > 200 || self.name.chars().any(char::is_control) {
            return Err(bad("cluster.name", &self.name, "1 to 200 bytes, no control characters"));
        }
        if router.is_empty() || router.len() > 200 {
            return Err(bad("name", &router, "1 to 200 bytes: each router of a cluster needs its own name"));
        }
        let listen: SocketAddr =
            host_port(&self.listen).parse().map_err(|_| bad("cluster.listen", &self.listen, "tcp://IP:PORT"))?;
        let advertise = match (self.advertise.as_str(), listen.ip().is_unspecified()) {
            ("", true) => {
                return Err(bad("cluster.advertise", &"", "HOST:PORT the others dial (listen is 0.0.0.0)"));
            }
            ("", false) => listen.to_string(),
            (a, _) => host_port(a).to_owned(),
        };
        if advertise.parse::<SocketAddr>().is_err() {
            return Err(bad("cluster.advertise", &advertise, "IP:PORT (the others dial it without a name lookup)"));
        }
        for uri in &self.client_advertise {
            if !crate::cluster::is_client_uri(uri) {
                return Err(bad(
                    "cluster.client_advertise",
                    uri,
                    "tcp://, tls:// or nats://HOST:PORT, HOST not 0.0.0.0",
                ));
            }
        }
        if self.client_advertise.len() > crate::cluster::CLIENT_URIS_MAX {
            return Err(bad("cluster.client_advertise", &self.client_advertise.len(), "at most 16 URIs"));
        }
        let mut peers = Vec::with_capacity(self.peers.len());
        for p in &self.peers {
            let Some(a) = tickwire_transport::tcp::resolve(host_port(p)) else {
                return Err(bad("cluster.peers", p, "tcp://HOST:PORT, resolvable"));
            };
            peers.push(a.to_string());
        }
        let heartbeat: Duration = humantime::parse_duration(&self.heartbeat)
            .ok()
            .filter(|d| *d >= Duration::from_millis(100))
            .ok_or_else(|| bad("cluster.heartbeat", &self.heartbeat, "a duration of 100ms or more"))?;
        let forget_after: Duration = humantime::parse_duration(&self.forget_after)
            .ok()
            .filter(|d| *d >= Duration::from_secs(1))
            .ok_or_else(|| bad("cluster.forget_after", &self.forget_after, "a duration of 1s or more"))?;
        let secret = tickwire_transport::tls::read_secret(&self.secret_file).map_err(|e| {
            tracing::error!("[router.cluster] secret_file {}: {e}", self.secret_file.display());
            bad("cluster.secret_file", &self.secret_file.display(), "a readable file, mode 600, holding the secret")
        })?;
        let secret: Vec<u8> = secret.trim_ascii().to_vec();
        if secret.len() < 16 {
            return Err(bad("cluster.secret_file", &self.secret_file.display(), "a secret of 16 bytes or more"));
        }
        let own_thread = match self.thread.as_str() {
            "auto" => None,
            "shared" => Some(false),
            "own" => Some(true),
            _ => return Err(bad("cluster.thread", &self.thread, "auto, shared or own")),
        };
        let tls = match &self.tls {
            None => None,
            Some(t) => Some(tickwire_transport::tls::peer_configs(&t.cert, &t.key, &t.ca).map_err(|e| {
                tracing::error!("[router.cluster.tls] {e}");
                bad("cluster.tls", &e, "a certificate and key (PEM) and the CA that signed every router's")
            })?),
        };
        // Routers left with the default name are told apart by address.
        let name = if router == super::DEFAULT_NAME { format!("{router}@{advertise}") } else { router.to_owned() };
        Ok(ClusterSettings {
            cluster: self.name.clone(),
            name,
            listen,
            advertise,
            clients: self.client_advertise.join(","),
            peers,
            secret,
            heartbeat,
            forget_after,
            max_frame: max_frame + crate::cluster::link::FRAME_OVERHEAD,
            tls,
            own_thread,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_settings_name_the_key_at_fault() {
        let dir = std::env::temp_dir().join(format!("tw-cluster-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = ClusterTable {
            name: "prod".into(),
            listen: "tcp://127.0.0.1:7700".into(),
            peers: vec!["tcp://127.0.0.1:7701".into()],
            secret_file: secret.clone(),
            ..ClusterTable::default()
        };
        let s = t.to_settings("a", 1 << 20).unwrap();
        assert_eq!(
            (s.advertise.as_str(), s.peers[0].as_str(), s.secret.len()),
            ("127.0.0.1:7700", "127.0.0.1:7701", 20)
        );
        let e = |t: ClusterTable| t.to_settings("a", 1 << 20).unwrap_err().to_string();
        assert!(e(ClusterTable { listen: "tcp://0.0.0.0:7700".into(), ..t.clone() }).starts_with("cluster.advertise"));
        assert!(e(ClusterTable { listen: "nowhere".into(), ..t.clone() }).starts_with("cluster.listen = nowhere"));
        assert!(e(ClusterTable { name: String::new(), ..t.clone() }).starts_with("cluster.name"));
        assert!(e(ClusterTable { heartbeat: "50ms".into(), ..t.clone() }).starts_with("cluster.heartbeat"));
        let forget = e(ClusterTable { forget_after: "500ms".into(), ..t.clone() });
        assert!(forget.starts_with("cluster.forget_after = 500ms"), "{forget}");
        assert!(e(ClusterTable { thread: "mine".into(), ..t.clone() }).starts_with("cluster.thread = mine"));
        assert_eq!(s.own_thread, None, "auto by default");
        assert_eq!(s.clients, "", "filled in from the listeners when none is given");
        let told = |uris: &[&str]| {
            let t = ClusterTable { client_advertise: uris.iter().map(|u| (*u).to_owned()).collect(), ..t.clone() };
            t.to_settings("a", 1 << 20).map(|s| s.clients).map_err(|e| e.to_string())
        };
        assert_eq!(
            told(&["tcp://10.0.0.1:7600", "tls://h.example:7601"]).unwrap(),
            "tcp://10.0.0.1:7600,tls://h.example:7601"
        );
        for bad in [
            "10.0.0.1:7600",
            "udp://h:1",
            "tcp://h",
            "tcp://h:0",
            "tcp://a:1,tcp://b:2",
            "tcp://a b:1",
            "tcp://0.0.0.0:1",
        ] {
            let why = told(&[bad]).unwrap_err();
            assert!(why.starts_with("cluster.client_advertise"), "{bad}: {why}");
        }
        let thread = |w: &str| ClusterTable { thread: w.into(), ..t.clone() }.to_settings("a", 1 << 20).unwrap();
        assert_eq!((thread("own").own_thread, thread("shared").own_thread), (Some(true), Some(false)));
        let missing = ClusterTlsFiles { cert: dir.join("no.pem"), key: dir.join("no.key"), ca: dir.join("ca.pem") };
        let why = e(ClusterTable { tls: Some(missing), ..t.clone() });
        assert!(why.starts_with("cluster.tls") && why.contains("no.pem"), "{why}");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(e(t.clone()).starts_with("cluster.secret_file"), "a secret others may read is refused");
        std::fs::write(&secret, "short").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(e(t).contains("16 bytes or more"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
