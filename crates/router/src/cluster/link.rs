//! One connection between two routers of a cluster: its stream link
//! (`tickwire_transport::link`, batched writes), where its handshake is,
//! and the proofs both ways.
//!
//! Each side sends HELLO at once, PROOF once it has the other's HELLO,
//! and acts on nothing else before the other's PROOF checks out:
//! PROOF = HMAC-SHA256(secret, cluster ‖ receiver's nonce ‖ sender's nonce
//! ‖ sender's name ‖ receiver's name ‖ whether the sender dialed). The
//! secret never crosses the link; a proof is good for one connection (the
//! receiver's nonce), one pair of routers and one direction: a router
//! refuses a HELLO bearing its own name, and one that was dialed makes
//! only proofs a dialer's check refuses, so a stranger who connects to two
//! routers cannot pass one's proof off to the other.
//!
//! What the proofs establish is who is at each end when the link is
//! made. Frames after them are not authenticated one by one: on a network
//! where someone can rewrite TCP streams, a plain link is not protected;
//! a TLS link (`[router.cluster.tls]`) is, and its certificate must name
//! the router its HELLO names ([`PeerLink::handshake`]).

use ring::hmac;
use std::sync::Arc;
use std::time::Duration;
use tickwire_transport::link::{Batching, LinkError, StreamLink};
use tickwire_transport::tls::Wire;
use tickwire_wire::cluster::{
    emit_group_message_header, emit_message_header, ClusterFrame, Hello, CLUSTER_PROTOCOL_VERSION, NONCE_LEN, PROOF_LEN,
};

/// Bytes a MESSAGE frame may hold beyond its payload (its header, a
/// topic of up to 65,535 bytes, and a GROUP_MESSAGE's list of groups of as
/// many): a router reads frames of up to its `limits.max_frame` plus this
/// from other routers.
pub const FRAME_OVERHEAD: usize = 2 * 65_536 + 64;
/// Bytes a link holds unwritten before messages for it are dropped.
pub const WRITE_LIMIT: usize = 16 << 20;
/// How long a link may take from its connection to the other's PROOF.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// Why a link a router made to itself ends (a peer list that names it).
pub const TO_ITSELF: &str = "a link to itself";

/// What this router says of itself in every HELLO.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The cluster's name.
    pub cluster: String,
    /// This router's name.
    pub name: String,
    /// Where it takes cluster links.
    pub listen: String,
    /// Where its clients connect (URIs separated by commas).
    pub clients: String,
    /// This run of it.
    pub incarnation: u64,
    /// The cluster's shared secret, as an HMAC key.
    pub key: hmac::Key,
    /// Its heartbeat interval.
    pub heartbeat: Duration,
}

/// The other router, as its HELLO said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Them {
    /// Its name.
    pub name: String,
    /// Where it takes cluster links.
    pub listen: String,
    /// Where its clients connect (URIs separated by commas).
    pub clients: String,
    /// Its run.
    pub incarnation: u64,
    nonce: [u8; NONCE_LEN],
    /// Its heartbeat interval, ms.
    pub heartbeat_ms: u32,
}

/// Where a link's handshake is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Dialed, the connection not yet made.
    Connecting,
    /// Our HELLO sent, waiting for theirs.
    Hello,
    /// Our PROOF sent, waiting for theirs.
    Proof(Them),
    /// Both proofs checked: frames flow.
    Up(Them),
}

/// One connection to another router.
#[derive(Debug)]
pub struct PeerLink {
    /// The connection and its halves.
    pub link: StreamLink,
    /// Where the handshake is.
    pub stage: Stage,
    /// We dialed it (else it was accepted).
    pub dialed: bool,
    /// The address dialed, or the one it came from.
    pub addr: String,
    /// When it started (monotonic ns): the handshake's deadline runs from it.
    pub since: u64,
    /// The peer it serves once up (an index into the agent's peers).
    pub peer: Option<u32>,
    /// When it last sent a PING (monotonic ns).
    pub pinged: u64,
    /// A frame came from the other end (it answered a dial).
    pub answered: bool,
    /// Up, it tells the other end what this router holds, as it drains
    /// ([`super::retell`]); `None` once done.
    pub retelling: Option<super::retell::Retelling>,
    nonce: [u8; NONCE_LEN],
    /// Frame scratch (kept: no allocation per frame).
    pub scratch: Vec<u8>,
}

/// What a PROOF signs: each part behind its length.
struct Transcript<'a> {
    cluster: &'a str,
    receiver_nonce: &'a [u8],
    sender_nonce: &'a [u8],
    sender: &'a str,
    receiver: &'a str,
    sender_dialed: bool,
    /// What the sender's HELLO said of where it takes links and clients:
    /// signed, so that no one on the path rewrites where clients are sent.
    sender_said: [&'a str; 2],
}

impl Transcript<'_> {
    fn bytes(&self) -> Vec<u8> {
        let role: &[u8] = if self.sender_dialed { b"dialer" } else { b"dialed" };
        let mut b = Vec::with_capacity(128);
        let parts = [
            self.cluster.as_bytes(),
            self.receiver_nonce,
            self.sender_nonce,
            self.sender.as_bytes(),
            self.receiver.as_bytes(),
            role,
            self.sender_said[0].as_bytes(),
            self.sender_said[1].as_bytes(),
        ];
        for part in parts {
            b.extend_from_slice(&(part.len() as u32).to_le_bytes());
            b.extend_from_slice(part);
        }
        b
    }
}

/// Why a link ends.
pub type Why = String;

impl PeerLink {
    /// A link on `wire` (connecting if `connecting`), made at `now`.
    pub fn new(wire: Arc<Wire>, (dialed, connecting): (bool, bool), addr: String, max_frame: usize, now: u64) -> Self {
        let mut nonce = [0u8; NONCE_LEN];
        // A nonce need not be secret, only new: the clock stands in if the
        // kernel's generator fails.
        if getrandom::fill(&mut nonce).is_err() {
            nonce[..8].copy_from_slice(&now.to_le_bytes());
        }
        let mut link = StreamLink::new(wire, (1, max_frame), WRITE_LIMIT, Batching::SMART);
        link.liveness = tickwire_transport::link::Liveness::new(Duration::ZERO, now);
        Self {
            link,
            stage: if connecting { Stage::Connecting } else { Stage::Hello },
            dialed,
            addr,
            since: now,
            peer: None,
            pinged: now,
            answered: false,
            retelling: None,
            nonce,
            scratch: Vec::new(),
        }
    }

    /// Sends a frame (batched at `now`).
    ///
    /// # Errors
    /// The link failed or its buffer is full.
    pub fn send(&mut self, f: &ClusterFrame<'_>, now: u64) -> Result<(), LinkError> {
        self.scratch.clear();
        f.emit(&mut self.scratch).map_err(|e| LinkError::Broken(e.to_string()))?;
        let (wire, _, writer) = self.link.parts();
        writer.push(wire, &self.scratch, now)
    }

    /// Sends one MESSAGE, its payload copied once, into the link's buffer;
    /// a GROUP_MESSAGE when it is to serve `groups` (names separated by a
    /// space; empty: none).
    ///
    /// # Errors
    /// The link failed, or its buffer is full ([`LinkError::Full`]: the
    /// message is lost, and the sequence shows it).
    pub fn send_message(
        &mut self,
        sequence: u64,
        discards: u32,
        flags: u8,
        (topic, payload, groups): (&str, &[u8], &str),
        now: u64,
    ) -> Result<(), LinkError> {
        self.scratch.clear();
        let emitted = if groups.is_empty() {
            emit_message_header(&mut self.scratch, sequence, discards, flags, topic)
        } else {
            emit_group_message_header(&mut self.scratch, (sequence, discards, flags), topic, groups)
        };
        emitted.map_err(|e| LinkError::Broken(e.to_string()))?;
        let head = self.scratch.len();
        let (wire, _, writer) = self.link.parts();
        let at = writer.reserve(wire, head + payload.len())?;
        let room = writer.buffer_mut(at);
        room[..head].copy_from_slice(&self.scratch);
        room[head..].copy_from_slice(payload);
        writer.commit(wire, now)
    }

    /// Sends our HELLO (the connection is made).
    ///
    /// # Errors
    /// The link failed.
    pub fn hello(&mut self, me: &Identity, now: u64) -> Result<(), LinkError> {
        self.stage = Stage::Hello;
        let h = Hello {
            version: CLUSTER_PROTOCOL_VERSION,
            incarnation: me.incarnation,
            nonce: self.nonce,
            heartbeat_ms: u32::try_from(me.heartbeat.as_millis()).unwrap_or(u32::MAX),
            cluster: &me.cluster,
            name: &me.name,
            listen: &me.listen,
            clients: &me.clients,
        };
        self.send(&ClusterFrame::Hello(h), now)?;
        let (wire, _, writer) = self.link.parts();
        writer.flush(wire, &mut []).map(|_| ())
    }

    /// Acts on a handshake frame; `Ok(true)` once the link is up.
    ///
    /// # Errors
    /// Why the link must end (a wrong cluster, name or proof, a frame out
    /// of turn).
    pub fn handshake(&mut self, me: &Identity, f: &ClusterFrame<'_>, now: u64) -> Result<bool, Why> {
        match (&self.stage, f) {
            (Stage::Hello, ClusterFrame::Hello(h)) => {
                if h.version != CLUSTER_PROTOCOL_VERSION {
                    return Err(format!(
                        "cluster protocol {} (this router speaks {CLUSTER_PROTOCOL_VERSION})",
                        h.version
                    ));
                }
                if h.cluster != me.cluster {
                    return Err(format!("cluster {:?}, this is {:?}", h.cluster, me.cluster));
                }
                if h.name == me.name {
                    return Err(if h.incarnation == me.incarnation {
                        TO_ITSELF.into()
                    } else {
                        format!("router name {:?} is this router's own: give each router its own --name", h.name)
                    });
                }
                if h.name.is_empty() || h.name.chars().any(char::is_control) {
                    return Err(format!("router name {:?} is empty or holds control characters", h.name));
                }
                if self.link.wire().is_tls() {
                    // TLS checked the chain; the certificate must name the
                    // router, or any router could pass for another.
                    let named = self.link.wire().peer_user();
                    if named.as_deref() != Some(h.name) {
                        return Err(format!(
                            "router {:?} showed a certificate naming {}: a router's cluster certificate must \
                             name it (subject CN = its name)",
                            h.name,
                            named.map_or_else(|| "no one".to_owned(), |n| format!("{n:?}"))
                        ));
                    }
                }
                let t = Transcript {
                    cluster: &me.cluster,
                    receiver_nonce: &h.nonce,
                    sender_nonce: &self.nonce,
                    sender: &me.name,
                    receiver: h.name,
                    sender_dialed: self.dialed,
                    sender_said: [&me.listen, &me.clients],
                };
                let tag = hmac::sign(&me.key, &t.bytes());
                let mut p = [0u8; PROOF_LEN];
                p.copy_from_slice(tag.as_ref());
                self.send(&ClusterFrame::Proof(p), now).map_err(|e| e.to_string())?;
                let them = Them {
                    name: h.name.into(),
                    listen: h.listen.into(),
                    clients: h.clients.into(),
                    incarnation: h.incarnation,
                    nonce: h.nonce,
                    heartbeat_ms: h.heartbeat_ms,
                };
                self.stage = Stage::Proof(them);
                Ok(false)
            }
            (Stage::Proof(them), ClusterFrame::Proof(p)) => {
                let t = Transcript {
                    cluster: &me.cluster,
                    receiver_nonce: &self.nonce,
                    sender_nonce: &them.nonce,
                    sender: &them.name,
                    receiver: &me.name,
                    sender_dialed: !self.dialed,
                    sender_said: [&them.listen, &them.clients],
                };
                if hmac::verify(&me.key, &t.bytes(), p).is_err() {
                    return Err(format!("router {:?} failed the cluster's secret (a wrong secret_file?)", them.name));
                }
                self.stage = Stage::Up(them.clone());
                Ok(true)
            }
            (Stage::Up(_), _) => Ok(true),
            (_, ClusterFrame::Close(why)) => Err(format!("closed by the peer: {why}")),
            (stage, f) => Err(format!("{} before the handshake ended ({stage:?})", frame_name(f))),
        }
    }

    /// The nonce of the router that dialed this link, once the handshake
    /// has both: two links one router dialed to the same other are told
    /// apart by it, the same way at both ends.
    pub fn dialer_nonce(&self) -> Option<[u8; NONCE_LEN]> {
        let them = match &self.stage {
            Stage::Up(t) | Stage::Proof(t) => t,
            _ => return None,
        };
        Some(if self.dialed { self.nonce } else { them.nonce })
    }

    /// The other router, once up.
    pub fn them(&self) -> Option<&Them> {
        match &self.stage {
            Stage::Up(t) => Some(t),
            _ => None,
        }
    }
}

/// A frame's name, for messages.
pub fn frame_name(f: &ClusterFrame<'_>) -> &'static str {
    match f {
        ClusterFrame::Hello(_) => "HELLO",
        ClusterFrame::Proof(_) => "PROOF",
        ClusterFrame::Routers(_) => "ROUTERS",
        ClusterFrame::Interest(_) => "INTEREST",
        ClusterFrame::Withdraw(_) => "WITHDRAW",
        ClusterFrame::Message { .. } => "MESSAGE",
        ClusterFrame::Heartbeat => "HEARTBEAT",
        ClusterFrame::Close(_) => "CLOSE",
        ClusterFrame::Ping(_) => "PING",
        ClusterFrame::Pong(_) => "PONG",
        ClusterFrame::Group { .. } => "GROUP",
        ClusterFrame::GroupMessage { .. } => "GROUP_MESSAGE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn me(name: &str, secret: &[u8]) -> Identity {
        Identity {
            cluster: "c".into(),
            name: name.into(),
            listen: "127.0.0.1:1".into(),
            clients: String::new(),
            incarnation: name.len() as u64,
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            heartbeat: Duration::from_secs(1),
        }
    }

    fn pair() -> (PeerLink, PeerLink) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let a = PeerLink::new(Arc::new(Wire::plain(c)), (true, false), "a".into(), 1 << 20, 0);
        let b = PeerLink::new(Arc::new(Wire::plain(s)), (false, false), "b".into(), 1 << 20, 0);
        (a, b)
    }

    /// Runs both handshakes by hand, frame by frame.
    fn shake(
        a: &mut PeerLink,
        ia: &Identity,
        b: &mut PeerLink,
        ib: &Identity,
    ) -> (Result<bool, Why>, Result<bool, Why>) {
        a.hello(ia, 0).unwrap();
        b.hello(ib, 0).unwrap();
        let hello = |x: &PeerLink, id: &Identity| {
            let mut v = Vec::new();
            ClusterFrame::Hello(Hello {
                version: CLUSTER_PROTOCOL_VERSION,
                incarnation: id.incarnation,
                nonce: x.nonce,
                heartbeat_ms: 1000,
                cluster: &id.cluster,
                name: &id.name,
                listen: &id.listen,
                clients: &id.clients,
            })
            .emit(&mut v)
            .unwrap();
            v
        };
        let (ha, hb) = (hello(a, ia), hello(b, ib));
        a.handshake(ia, &ClusterFrame::parse(&hb).unwrap(), 0).unwrap();
        b.handshake(ib, &ClusterFrame::parse(&ha).unwrap(), 0).unwrap();
        // Each one's PROOF, as it sent it.
        let Stage::Proof(ta) = a.stage.clone() else { panic!() };
        let Stage::Proof(tb) = b.stage.clone() else { panic!() };
        let proof = |x: &PeerLink, id: &Identity, t: &Them| {
            let t = Transcript {
                cluster: &id.cluster,
                receiver_nonce: &t.nonce,
                sender_nonce: &x.nonce,
                sender: &id.name,
                receiver: &t.name,
                sender_dialed: x.dialed,
                sender_said: [&id.listen, &id.clients],
            };
            hmac::sign(&id.key, &t.bytes())
        };
        let (pa, pb) = (proof(a, ia, &ta), proof(b, ib, &tb));
        let arr = |t: hmac::Tag| {
            let mut p = [0u8; PROOF_LEN];
            p.copy_from_slice(t.as_ref());
            p
        };
        (a.handshake(ia, &ClusterFrame::Proof(arr(pb)), 0), b.handshake(ib, &ClusterFrame::Proof(arr(pa)), 0))
    }

    #[test]
    fn two_routers_with_the_secret_prove_it_to_each_other() {
        let (mut a, mut b) = pair();
        let (ra, rb) = shake(&mut a, &me("a", b"s3cret"), &mut b, &me("bb", b"s3cret"));
        assert_eq!((ra, rb), (Ok(true), Ok(true)));
        assert_eq!(a.them().unwrap().name, "bb");
        assert_eq!(b.them().unwrap().name, "a");
    }

    /// A stranger connects to L claiming to be H, and to H claiming to be
    /// L, and hands H the proof L made for it: L made it as a router that
    /// was dialed, and H, dialed by the stranger, wants a dialer's.
    #[test]
    fn a_proof_relayed_from_one_router_to_another_is_refused() {
        let (_m, mut h) = pair();
        let (ih, il) = (me("h", b"s3cret"), me("l", b"s3cret"));
        h.hello(&ih, 0).unwrap();
        let nl = [5u8; NONCE_LEN];
        let hello = Hello {
            version: CLUSTER_PROTOCOL_VERSION,
            incarnation: 9,
            nonce: nl,
            heartbeat_ms: 1000,
            cluster: "c",
            name: "l",
            listen: "x",
            clients: "tcp://10.0.0.9:7600",
        };
        h.handshake(&ih, &ClusterFrame::Hello(hello), 0).unwrap();
        assert!(matches!(&h.stage, Stage::Proof(t) if t.clients == "tcp://10.0.0.9:7600"), "where its clients go");
        let nh = h.nonce;
        let made_by_l = |sender_dialed: bool| {
            let t = Transcript {
                cluster: "c",
                receiver_nonce: &nh,
                sender_nonce: &nl,
                sender: "l",
                receiver: "h",
                sender_dialed,
                sender_said: ["x", "tcp://10.0.0.9:7600"],
            };
            let mut p = [0u8; PROOF_LEN];
            p.copy_from_slice(hmac::sign(&il.key, &t.bytes()).as_ref());
            p
        };
        let e = h.handshake(&ih, &ClusterFrame::Proof(made_by_l(false)), 0).unwrap_err();
        assert!(e.contains("failed the cluster's secret"), "{e}");
        // A HELLO whose client URIs were rewritten on the way fails too.
        let them = |clients: &str| {
            Stage::Proof(Them {
                name: "l".into(),
                listen: "x".into(),
                clients: clients.into(),
                incarnation: 9,
                nonce: nl,
                heartbeat_ms: 1000,
            })
        };
        h.stage = them("tcp://10.6.6.6:7600");
        let e = h.handshake(&ih, &ClusterFrame::Proof(made_by_l(true)), 0).unwrap_err();
        assert!(e.contains("failed the cluster's secret"), "{e}");
        // (The same proof made as a dialer is what a real L sends.)
        h.stage = them("tcp://10.0.0.9:7600");
        assert_eq!(h.handshake(&ih, &ClusterFrame::Proof(made_by_l(true)), 0), Ok(true));
    }

    #[test]
    fn a_wrong_secret_a_wrong_cluster_or_our_own_name_is_refused() {
        let (mut a, mut b) = pair();
        let (ra, rb) = shake(&mut a, &me("a", b"one"), &mut b, &me("bb", b"two"));
        assert!(ra.unwrap_err().contains("failed the cluster's secret"));
        assert!(rb.unwrap_err().contains("\"a\" failed"));
        let (mut a, _b) = pair();
        let mut other = me("bb", b"s");
        other.cluster = "d".into();
        a.hello(&me("a", b"s"), 0).unwrap();
        let mut v = Vec::new();
        let h = Hello {
            version: CLUSTER_PROTOCOL_VERSION,
            incarnation: 2,
            nonce: [0; 16],
            heartbeat_ms: 1000,
            cluster: "d",
            name: "bb",
            listen: "x",
            clients: "",
        };
        ClusterFrame::Hello(h).emit(&mut v).unwrap();
        let e = a.handshake(&me("a", b"s"), &ClusterFrame::parse(&v).unwrap(), 0).unwrap_err();
        assert!(e.contains("cluster \"d\""), "{e}");
        let (mut a, _b) = pair();
        a.hello(&me("a", b"s"), 0).unwrap();
        let h = Hello {
            version: CLUSTER_PROTOCOL_VERSION,
            incarnation: 99,
            nonce: [0; 16],
            heartbeat_ms: 1000,
            cluster: "c",
            name: "a",
            listen: "x",
            clients: "",
        };
        let e = a.handshake(&me("a", b"s"), &ClusterFrame::Hello(h), 0).unwrap_err();
        assert!(e.contains("this router's own"), "{e}");
        let (mut a, _b) = pair();
        a.hello(&me("a", b"s"), 0).unwrap();
        let e = a.handshake(&me("a", b"s"), &ClusterFrame::Interest("x"), 0).unwrap_err();
        assert!(e.contains("INTEREST before the handshake"), "{e}");
        drop(other);
    }
}
