//! NATS clients' sessions ([`tickwire_nats::session`]) in front of the
//! router's one routing core, driven without I/O: NATS bytes in, the
//! router's frames through the translation, NATS bytes out. Publish and
//! subscribe with wildcards among NATS clients and with native clients,
//! queue groups, request/reply with NATS reply subjects and no responders,
//! UNSUB after a count, headers both ways, and what tickwire does not have
//! refused by name.

use tickwire_nats::parse::{parse, Limits as NatsLimits};
use tickwire_nats::session::{After, NatsSession};
use tickwire_router::{Limits, MemoryOut, Outbound, Router};
use tickwire_wire::client::flags;
use tickwire_wire::client::{ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};
use tickwire_wire::{headers, ClientFrame};

/// A NATS client's connection, as the router's agent would hold it.
struct Nats {
    id: u32,
    session: NatsSession,
    /// What the client was sent.
    out: Vec<u8>,
    closed: bool,
}

impl Nats {
    fn connect(r: &mut Router, connect: &str) -> Self {
        let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), "nats".into());
        let mut n = Self { id, session: NatsSession::new(), out: Vec::new(), closed: false };
        n.send(r, &format!("CONNECT {connect}\r\nPING\r\n"));
        assert_eq!(n.take(), "", "nothing before the router's WELCOME");
        n.pump(r);
        assert_eq!(n.take(), if connect.contains("\"verbose\":true") { "+OK\r\nPONG\r\n" } else { "PONG\r\n" });
        n
    }

    /// The client sends `text`; everything it leads to is moved along.
    fn send(&mut self, r: &mut Router, text: &str) {
        let (mut at, limits) = (0, NatsLimits::default());
        let bytes = text.as_bytes();
        while let Some((op, used)) = parse(&bytes[at..], &limits).unwrap() {
            at += used;
            let mut frames = Vec::new();
            if self.session.handle_op(op, &mut frames, &mut self.out).is_err() {
                self.closed = true;
                return;
            }
            for f in frames {
                r.handle_frame(self.id, &f).unwrap();
            }
        }
        assert_eq!(at, bytes.len(), "whole operations only");
    }

    /// Moves what the router sent this client through the translation.
    fn pump(&mut self, r: &mut Router) {
        let Some(s) = r.session_mut(self.id) else { return };
        let Outbound::Memory(m) = s.outbound_mut() else { panic!() };
        for b in std::mem::take(&mut m.frames) {
            let f = ClientFrame::new_checked(&b).unwrap();
            match self.session.handle_frame(&f, &mut self.out) {
                After::Nothing => {}
                After::Close => self.closed = true,
                After::Frames(fs) => {
                    for f in fs {
                        r.handle_frame(self.id, &f).unwrap();
                    }
                }
            }
        }
    }

    fn take(&mut self) -> String {
        String::from_utf8(std::mem::take(&mut self.out)).unwrap()
    }
}

fn pump(r: &mut Router, all: &mut [&mut Nats]) {
    for n in all.iter_mut() {
        n.pump(r);
    }
}

fn frame(r: ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

/// A native client's session (its frames kept in memory).
fn native(r: &mut Router, pattern: Option<&str>) -> u32 {
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), "native".into());
    let hello = ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: "native", ..ClientRepr::new(ClientKind::Hello) };
    r.handle_frame(id, &frame(hello)).unwrap();
    if let Some(p) = pattern {
        r.handle_frame(id, &frame(ClientRepr { value: 1, topic: p, ..ClientRepr::new(ClientKind::Subscribe) }))
            .unwrap();
    }
    delivered(r, id);
    id
}

/// The (topic, payload) of what native session `id` was delivered.
fn delivered(r: &mut Router, id: u32) -> Vec<(String, Vec<u8>)> {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    std::mem::take(&mut m.frames)
        .iter()
        .filter_map(|b| {
            let f = ClientFrame::new_checked(b).unwrap();
            (f.kind() == ClientKind::Deliver).then(|| (f.topic().to_owned(), f.body().to_vec()))
        })
        .collect()
}

#[test]
fn nats_clients_publish_and_subscribe_with_wildcards_one_msg_per_matching_subscription() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut sub = Nats::connect(&mut r, "{\"verbose\":true}");
    let mut publ = Nats::connect(&mut r, "{}");
    sub.send(&mut r, "SUB md.eu.* 1\r\nsub md.> 2\r\nSUB fx.> 3\r\n");
    assert_eq!(sub.take(), "+OK\r\n+OK\r\n+OK\r\n", "verbose: +OK for each");
    publ.send(&mut r, "PUB md.eu.VOD 5\r\nhello\r\nPUB md.us.IBM 2\r\nhi\r\nPUB other 1\r\nx\r\n");
    pump(&mut r, &mut [&mut sub, &mut publ]);
    assert_eq!(
        sub.take(),
        "MSG md.eu.VOD 1 5\r\nhello\r\nMSG md.eu.VOD 2 5\r\nhello\r\nMSG md.us.IBM 2 2\r\nhi\r\n",
        "a message to each subscription its subject matches, as a NATS server sends it"
    );
    assert_eq!(publ.take(), "", "not verbose: nothing for a PUB");
}

#[test]
fn nats_and_native_clients_reach_each_other_with_the_same_bytes() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut n = Nats::connect(&mut r, "{}");
    n.send(&mut r, "SUB md.> 1\r\n");
    let native_sub = native(&mut r, Some("md/>"));
    let payload: Vec<u8> = (0..=255u8).collect();
    // NATS to native: a binary payload as it was.
    let mut text = format!("PUB md.eu.VOD {}\r\n", payload.len()).into_bytes();
    text.extend_from_slice(&payload);
    text.extend_from_slice(b"\r\n");
    let (op, _) = parse(&text, &NatsLimits::default()).unwrap().unwrap();
    let mut frames = Vec::new();
    n.session.handle_op(op, &mut frames, &mut n.out).unwrap();
    for f in frames {
        r.handle_frame(n.id, &f).unwrap();
    }
    assert_eq!(delivered(&mut r, native_sub), [("md/eu/VOD".to_owned(), payload.clone())]);
    n.pump(&mut r);
    assert!(n.out.ends_with(&[&payload[..], b"\r\n"].concat()), "and to the NATS subscriber too");
    n.out.clear();
    // Native to NATS.
    let p = native(&mut r, None);
    let publish = ClientRepr { topic: "md/us/IBM", body: b"bid 101", ..ClientRepr::new(ClientKind::Publish) };
    r.handle_frame(p, &frame(publish)).unwrap();
    n.pump(&mut r);
    assert_eq!(n.take(), "MSG md.us.IBM 1 7\r\nbid 101\r\n");
}

#[test]
fn a_queue_group_of_nats_clients_gets_each_message_once() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut a = Nats::connect(&mut r, "{}");
    let mut b = Nats::connect(&mut r, "{}");
    let mut p = Nats::connect(&mut r, "{}");
    a.send(&mut r, "SUB orders.* workers 1\r\n");
    b.send(&mut r, "SUB orders.* workers 7\r\n");
    for i in 0..100 {
        p.send(&mut r, &format!("PUB orders.eu 3\r\n{i:03}\r\n"));
    }
    pump(&mut r, &mut [&mut a, &mut b, &mut p]);
    let (ta, tb) = (a.take(), b.take());
    let (na, nb) = (ta.matches("MSG orders.eu 1 3").count(), tb.matches("MSG orders.eu 7 3").count());
    assert_eq!(na + nb, 100, "each once");
    assert!(na >= 40 && nb >= 40, "spread: {na} and {nb}");
}

#[test]
fn request_reply_between_nats_clients_goes_by_their_reply_subjects_and_no_responders_is_a_503() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut requester = Nats::connect(&mut r, "{\"headers\":true,\"no_responders\":true}");
    let mut responder = Nats::connect(&mut r, "{}");
    requester.send(&mut r, "SUB _INBOX.abc.* 9\r\n");
    responder.send(&mut r, "SUB rfq.> 1\r\n");
    requester.send(&mut r, "PUB rfq.eu.VOD _INBOX.abc.1 7\r\nbuy 100\r\n");
    pump(&mut r, &mut [&mut requester, &mut responder]);
    let got = responder.take();
    let reply_to = got.split_whitespace().nth(3).unwrap().to_owned();
    assert!(got.starts_with("MSG rfq.eu.VOD 1 _inbox.") && got.ends_with(" 7\r\nbuy 100\r\n"), "{got}");
    responder.send(&mut r, &format!("PUB {reply_to} 9\r\nquote 101\r\n"));
    pump(&mut r, &mut [&mut requester, &mut responder]);
    assert_eq!(requester.take(), "MSG _INBOX.abc.1 9 9\r\nquote 101\r\n", "on the subject the request named");

    // Nobody on the subject: the 503 status message, at once.
    requester.send(&mut r, "PUB rfq2.none _INBOX.abc.2 1\r\nx\r\n");
    pump(&mut r, &mut [&mut requester]);
    assert_eq!(requester.take(), "HMSG _INBOX.abc.2 9 16 16\r\nNATS/1.0 503\r\n\r\n\r\n");
}

#[test]
fn unsub_with_a_count_ends_the_subscription_after_it_at_the_router_too() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut s = Nats::connect(&mut r, "{}");
    let mut p = Nats::connect(&mut r, "{}");
    s.send(&mut r, "SUB md.> 5\r\nUNSUB 5 2\r\n");
    for _ in 0..5 {
        p.send(&mut r, "PUB md.x 1\r\nx\r\n");
        pump(&mut r, &mut [&mut s, &mut p]);
    }
    assert_eq!(s.take().matches("MSG md.x 5 1").count(), 2);
    assert_eq!(r.session(s.id).unwrap().subscriptions(), 0, "the router was told");
    assert_eq!(s.session.subscriptions(), 0);
}

#[test]
fn what_tickwire_does_not_have_is_refused_by_name_and_the_connection_kept() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut n = Nats::connect(&mut r, "{}");
    n.send(&mut r, "PUB $JS.API.INFO 0\r\n\r\nSUB $SYS.> 1\r\nHPUB a 12 14\r\nNATS/1.0\r\n\r\nhi\r\n");
    let long = format!("NATS/1.0\r\nK: {}\r\n\r\n", "v".repeat(70_000));
    n.send(&mut r, &format!("HPUB a {} {}\r\n{long}hi\r\nPUB a/b 0\r\n\r\n", long.len(), long.len() + 2));
    let out = n.take();
    assert!(out.contains("-ERR 'JetStream is not supported by tickwire"), "{out}");
    assert!(out.contains("-ERR 'the NATS system account ($SYS) is not supported"), "{out}");
    assert!(out.contains("-ERR 'Bad Headers: a header block of 70017 bytes"), "{out}");
    assert!(out.contains("-ERR 'Invalid Subject"), "{out}");
    assert_eq!(out.matches("-ERR").count(), 4, "an empty header block is a publish with headers: {out}");
    assert!(!n.closed);
    // Before CONNECT, or a second one: the end.
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), "nats".into());
    let mut early = Nats { id, session: NatsSession::new(), out: Vec::new(), closed: false };
    early.send(&mut r, "SUB a 1\r\n");
    assert!(early.closed && early.take().starts_with("-ERR 'Authorization Violation"));
    n.send(&mut r, "CONNECT {}\r\n");
    assert!(n.closed);
}

#[test]
fn a_subscription_the_router_refuses_is_forgotten_and_counts_run_from_sub() {
    let limits = Limits { max_subscriptions: 1, ..Limits::default() };
    let mut r = Router::new("test", limits, None);
    let mut s = Nats::connect(&mut r, "{}");
    let mut p = Nats::connect(&mut r, "{}");
    // The second is past the router's limit: refused, and not kept here.
    s.send(&mut r, "SUB md.> 1\r\nSUB md.eu 2\r\n");
    s.pump(&mut r);
    assert!(s.take().starts_with("-ERR"));
    assert_eq!(s.session.subscriptions(), 1);
    // Two messages, then UNSUB 1 2: it has had both, so it ends at once.
    p.send(&mut r, "PUB md.eu 1\r\na\r\nPUB md.eu 1\r\nb\r\n");
    pump(&mut r, &mut [&mut s, &mut p]);
    assert_eq!(s.take(), "MSG md.eu 1 1\r\na\r\nMSG md.eu 1 1\r\nb\r\n");
    s.send(&mut r, "UNSUB 1 2\r\n");
    p.send(&mut r, "PUB md.eu 1\r\nc\r\n");
    pump(&mut r, &mut [&mut s, &mut p]);
    assert_eq!(s.take(), "");
    assert_eq!(r.session(s.id).unwrap().subscriptions(), 0);
}

#[test]
fn a_native_topic_with_a_dot_in_a_level_reaches_the_subscriptions_it_matches() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut n = Nats::connect(&mut r, "{}");
    n.send(&mut r, "SUB md.* 1\r\n");
    let p = native(&mut r, None);
    r.handle_frame(p, &frame(ClientRepr { topic: "md/eu.x", body: b"v", ..ClientRepr::new(ClientKind::Publish) }))
        .unwrap();
    n.pump(&mut r);
    assert_eq!(n.take(), "MSG md.eu.x 1 1\r\nv\r\n", "matched on its topic, not on the subject spelled back");
}

#[test]
fn two_subscriptions_of_one_queue_group_on_one_connection_get_one_copy() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut s = Nats::connect(&mut r, "{}");
    let mut p = Nats::connect(&mut r, "{}");
    s.send(&mut r, "SUB q.> g 1\r\nSUB q.* g 2\r\n");
    p.send(&mut r, "PUB q.x 1\r\nz\r\n");
    pump(&mut r, &mut [&mut s, &mut p]);
    assert_eq!(s.take().matches("MSG q.x").count(), 1);
}

#[test]
fn echo_false_keeps_a_client_s_own_publishes_from_its_subscriptions_and_no_one_else_s() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut quiet = Nats::connect(&mut r, "{\"echo\":false}");
    let mut loud = Nats::connect(&mut r, "{}");
    for n in [&mut quiet, &mut loud] {
        n.send(&mut r, "SUB md.> 1\r\nSUB md.* g 2\r\n");
    }
    quiet.send(&mut r, "PUB md.q 1\r\nq\r\n");
    loud.send(&mut r, "PUB md.l 1\r\nl\r\n");
    pump(&mut r, &mut [&mut quiet, &mut loud]);
    let (q, l) = (quiet.take(), loud.take());
    assert!(!q.contains("MSG md.q"), "not its own: {q}");
    assert!(q.contains("MSG md.l 1 1"), "but others': {q}");
    // The loud one gets both on its plain subscription, and the queue
    // group's copy of the quiet one's message (the only other member).
    assert!(l.contains("MSG md.q 1 1") && l.contains("MSG md.l 1 1"), "{l}");
    assert!(l.contains("MSG md.q 2 1"), "the group skipped the publisher that asked not to get its own: {l}");
}

/// A delivery's flags, headers and payload.
type Headed = (u8, Vec<(String, String)>, Vec<u8>);

/// The (flags, headers, payload) of the messages native session `id` was
/// delivered.
fn delivered_headed(r: &mut Router, id: u32) -> Vec<Headed> {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    std::mem::take(&mut m.frames)
        .iter()
        .filter_map(|b| {
            let f = ClientFrame::new_checked(b).unwrap();
            (f.kind() == ClientKind::Deliver).then(|| {
                if f.flags() & flags::HEADERS == 0 {
                    return (f.flags(), Vec::new(), f.body().to_vec());
                }
                let (h, p) = headers::split(f.body()).unwrap();
                let pairs = h.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
                (f.flags(), pairs, p.to_vec())
            })
        })
        .collect()
}

#[test]
fn headers_pass_between_nats_and_native_clients_and_a_client_without_headers_gets_the_payload() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut headed = Nats::connect(&mut r, "{\"headers\":true}");
    let mut plain = Nats::connect(&mut r, "{}");
    let mut publ = Nats::connect(&mut r, "{\"headers\":true}");
    let nat = native(&mut r, Some("md/>"));
    headed.send(&mut r, "SUB md.> 1\r\n");
    plain.send(&mut r, "SUB md.> 2\r\n");
    publ.send(&mut r, "HPUB md.x 18 20\r\nNATS/1.0\r\nK: v\r\n\r\nhi\r\n");
    pump(&mut r, &mut [&mut headed, &mut plain, &mut publ]);
    assert_eq!(headed.take(), "HMSG md.x 1 18 20\r\nNATS/1.0\r\nK: v\r\n\r\nhi\r\n");
    assert_eq!(plain.take(), "MSG md.x 2 2\r\nhi\r\n", "no headers to a client that did not ask");
    let got = delivered_headed(&mut r, nat);
    assert_eq!(got, [(flags::HEADERS, vec![("K".into(), "v".into())], b"hi".to_vec())]);

    // A native client's headers reach a NATS client as HMSG.
    let mut body = Vec::new();
    headers::put(&mut body, &[("Trace", "t-1")], b"bid").unwrap();
    let p = ClientRepr { topic: "md/y", body: &body, flags: flags::HEADERS, ..ClientRepr::new(ClientKind::Publish) };
    r.handle_frame(nat, &frame(p)).unwrap();
    pump(&mut r, &mut [&mut headed, &mut plain]);
    assert_eq!(headed.take(), "HMSG md.y 1 24 27\r\nNATS/1.0\r\nTrace: t-1\r\n\r\nbid\r\n");
    assert_eq!(plain.take(), "MSG md.y 2 3\r\nbid\r\n");
}

#[test]
fn a_request_and_its_reply_carry_their_headers() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut requester = Nats::connect(&mut r, "{\"headers\":true}");
    let mut responder = Nats::connect(&mut r, "{\"headers\":true}");
    requester.send(&mut r, "SUB _INBOX.r.* 9\r\n");
    responder.send(&mut r, "SUB rfq 1\r\n");
    requester.send(&mut r, "HPUB rfq _INBOX.r.1 18 21\r\nNATS/1.0\r\nQ: 1\r\n\r\nbuy\r\n");
    pump(&mut r, &mut [&mut requester, &mut responder]);
    let got = responder.take();
    let reply_to = got.split_whitespace().nth(3).unwrap().to_owned();
    assert!(
        got.starts_with("HMSG rfq 1 _inbox.") && got.ends_with(" 18 21\r\nNATS/1.0\r\nQ: 1\r\n\r\nbuy\r\n"),
        "{got}"
    );
    responder.send(&mut r, &format!("HPUB {reply_to} 18 22\r\nNATS/1.0\r\nA: 2\r\n\r\n1015\r\n"));
    pump(&mut r, &mut [&mut requester, &mut responder]);
    assert_eq!(requester.take(), "HMSG _INBOX.r.1 9 18 22\r\nNATS/1.0\r\nA: 2\r\n\r\n1015\r\n");
}

#[test]
fn the_last_value_cache_keeps_a_message_s_headers_and_a_bad_block_from_a_native_client_ends_it() {
    use tickwire_router::cache::{CacheConfig, LastValues};
    use tickwire_topic::Pattern;
    let mut r = Router::new("test", Limits::default(), None);
    let cfg = CacheConfig { patterns: vec![Pattern::parse("md/>").unwrap()], max_topics: 10, max_bytes: 1 << 20 };
    r.set_cache(LastValues::new(cfg));
    let mut publ = Nats::connect(&mut r, "{\"headers\":true}");
    publ.send(&mut r, "HPUB md.x 18 20\r\nNATS/1.0\r\nK: v\r\n\r\nhi\r\n");
    let late = native(&mut r, None);
    let sub = ClientRepr { value: 1, topic: "md/>", flags: flags::CACHED, ..ClientRepr::new(ClientKind::Subscribe) };
    r.handle_frame(late, &frame(sub)).unwrap();
    let got = delivered_headed(&mut r, late);
    assert_eq!(got, [(flags::HEADERS | flags::CACHED, vec![("K".into(), "v".into())], b"hi".to_vec())]);

    // A block the client library would never send: a protocol violation.
    let bad = ClientRepr {
        topic: "md/x",
        body: b"\x09\0\0\0NATS",
        flags: flags::HEADERS,
        ..ClientRepr::new(ClientKind::Publish)
    };
    let e = r.handle_frame(late, &frame(bad)).unwrap_err();
    assert!(e.reason.contains("header block"), "{}", e.reason);
}

#[test]
fn a_connection_with_a_plain_and_a_queue_subscription_on_one_subject_gets_each_as_nats_would() {
    let mut r = Router::new("test", Limits::default(), None);
    let mut a = Nats::connect(&mut r, "{}");
    let mut b = Nats::connect(&mut r, "{}");
    let mut p = Nats::connect(&mut r, "{}");
    a.send(&mut r, "SUB x 1\r\nSUB x q 2\r\n");
    b.send(&mut r, "SUB x q 3\r\n");
    for _ in 0..10 {
        p.send(&mut r, "PUB x 1\r\nx\r\n");
    }
    pump(&mut r, &mut [&mut a, &mut b, &mut p]);
    let (ta, tb) = (a.take(), b.take());
    let count = |t: &str, sid: &str| t.matches(&format!("MSG x {sid} 1\r\n")).count();
    // The plain subscription gets every message; the group shares them.
    assert_eq!(count(&ta, "1"), 10, "{ta}");
    assert_eq!(count(&ta, "2") + count(&tb, "3"), 10, "{ta}{tb}");
    assert!(count(&ta, "2") > 0 && count(&tb, "3") > 0, "round-robin: {ta}{tb}");
}
