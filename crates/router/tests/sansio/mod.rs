//! The routing core driven without I/O, for the tests: frames in, sessions
//! on in-memory transports, two routers wired as two routing agents.
#![allow(dead_code)]

use tickwire_router::{Limits, MemoryOut, Outbound, Router};
use tickwire_wire::client::{ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};
use tickwire_wire::ClientFrame;

pub fn frame(r: ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}
pub fn hello(name: &str) -> Vec<u8> {
    frame(ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: name, ..ClientRepr::new(ClientKind::Hello) })
}
pub fn subscribe(id: u32, pattern: &str) -> Vec<u8> {
    frame(ClientRepr { value: id, topic: pattern, ..ClientRepr::new(ClientKind::Subscribe) })
}
pub fn publish(topic: &str, body: &[u8]) -> Vec<u8> {
    frame(ClientRepr { topic, body, ..ClientRepr::new(ClientKind::Publish) })
}

pub fn client(r: &mut Router, name: &str, room: usize) -> u32 {
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room }), format!("test {name}"));
    r.handle_frame(id, &hello(name)).unwrap();
    let got = drain(r, id);
    assert_eq!(got[0].0, ClientKind::Welcome);
    id
}

/// (kind, topic, body, value, sequence) of every frame the session was sent.
pub fn drain(r: &mut Router, id: u32) -> Vec<(ClientKind, String, Vec<u8>, u32, u64)> {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    std::mem::take(&mut m.frames)
        .iter()
        .map(|b| {
            let f = ClientFrame::new_checked(b).unwrap();
            (f.kind(), f.topic().to_owned(), f.body().to_vec(), f.value(), f.sequence())
        })
        .collect()
}

pub fn topics(frames: &[(ClientKind, String, Vec<u8>, u32, u64)]) -> Vec<&str> {
    frames.iter().filter(|f| f.0 == ClientKind::Deliver).map(|f| f.1.as_str()).collect()
}

/// Two routing agents' routers wired as the server wires them.
pub struct Pair {
    pub r: [Router; 2],
    from0: tickwire_router::peers::LinkReader,
    from1: tickwire_router::peers::LinkReader,
}

impl Pair {
    pub fn new(link_bytes: usize) -> Self {
        use tickwire_router::peers::{link, Peers};
        let (l01, from0) = link(link_bytes, None);
        let (l10, from1) = link(link_bytes, None);
        let r0 = Router::with_peers("test", Limits::default(), None, Peers::new(0, vec![None, Some(l01)]), 2);
        let r1 = Router::with_peers("test", Limits::default(), None, Peers::new(1, vec![Some(l10), None]), 2);
        Self { r: [r0, r1], from0, from1 }
    }

    /// What the agents' duty cycles pass each other: interest, then messages.
    pub fn exchange(&mut self) {
        let [r0, r1] = &mut self.r;
        for change in r0.take_announcements() {
            r1.handle_interest(&change);
        }
        for change in r1.take_announcements() {
            r0.handle_interest(&change);
        }
        self.from0.receive(usize::MAX, |m| r1.route_forwarded(m));
        self.from1.receive(usize::MAX, |m| r0.route_forwarded(m));
    }
}
