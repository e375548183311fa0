//! The NATS client protocol's parser (`tickwire_nats::parse`), fed what a
//! hostile NATS client may send.

use tickwire_nats::parse::{parse, ClientOp, Connect, Limits};

/// Client bytes as a connection reads them: parsed to the end (or the
/// first refusal) whole, and again cut in two at a point the input picks.
/// Invariants: no panic; every operation takes at least one byte and no
/// more than there is; the cut input parses to the same operations and
/// the same refusal; an operation spelled back parses to itself.
pub fn nats(data: &[u8]) {
    let limits = Limits { max_control_line: 256, max_payload: 4096 };
    let whole = run(&[data], &limits);
    let cut = data.first().map_or(0, |&b| usize::from(b) % (data.len() + 1));
    let split = run(&[&data[..cut], &data[cut..]], &limits);
    assert_eq!(whole, split, "cut at {cut}");
}

/// Feeds `parts` one after another as reads; the operations parsed, each
/// spelled back and checked, and the refusal if one came.
fn run(parts: &[&[u8]], limits: &Limits) -> (Vec<String>, Option<String>) {
    let (mut ops, mut buf) = (Vec::new(), Vec::new());
    for part in parts {
        buf.extend_from_slice(part);
        let mut used = 0;
        loop {
            match parse(&buf[used..], limits) {
                Ok(Some((op, n))) => {
                    assert!(n > 0 && n <= buf.len() - used, "{op:?} took {n} of {}", buf.len() - used);
                    round_trip(&op, limits);
                    ops.push(format!("{op:?}"));
                    used += n;
                }
                Ok(None) => break,
                Err(e) => return (ops, Some(e.to_string())),
            }
        }
        buf.drain(..used);
    }
    (ops, None)
}

/// `op` spelled as a client would send it parses back to itself.
fn round_trip(op: &ClientOp<'_>, limits: &Limits) {
    let mut b = Vec::new();
    match *op {
        ClientOp::Connect(json) => {
            let _ = Connect::parse(json);
            return;
        }
        ClientOp::Pub { subject, reply, headers, payload } => {
            let name = if headers.is_some() { "HPUB" } else { "PUB" };
            b.extend_from_slice(format!("{name} {subject} ").as_bytes());
            if let Some(r) = reply {
                b.extend_from_slice(format!("{r} ").as_bytes());
            }
            let h = headers.unwrap_or_default();
            if headers.is_some() {
                b.extend_from_slice(format!("{} ", h.len()).as_bytes());
            }
            b.extend_from_slice(format!("{}\r\n", h.len() + payload.len()).as_bytes());
            b.extend_from_slice(h);
            b.extend_from_slice(payload);
            b.extend_from_slice(b"\r\n");
        }
        ClientOp::Sub { subject, queue, sid } => match queue {
            Some(q) => b.extend_from_slice(format!("SUB {subject} {q} {sid}\r\n").as_bytes()),
            None => b.extend_from_slice(format!("SUB {subject} {sid}\r\n").as_bytes()),
        },
        ClientOp::Unsub { sid, max } => match max {
            Some(m) => b.extend_from_slice(format!("UNSUB {sid} {m}\r\n").as_bytes()),
            None => b.extend_from_slice(format!("UNSUB {sid}\r\n").as_bytes()),
        },
        ClientOp::Ping => b.extend_from_slice(b"PING\r\n"),
        ClientOp::Pong => b.extend_from_slice(b"PONG\r\n"),
    }
    // The spelled-back line may be longer than the original (one space for
    // a tab run), so it is parsed under a control line limit that fits.
    let wide = Limits { max_control_line: limits.max_control_line + 64, ..*limits };
    let again = parse(&b, &wide).expect("a spelled-back operation parses").expect("whole");
    assert_eq!((again.0, again.1), (*op, b.len()));
}

/// A NATS client's session (`tickwire_nats::session`) fed, in an order the
/// input picks, what a hostile client sends and what a router may send it
/// (any frame: a hostile peer's bytes reach it only through the router,
/// but the state machine must not trust their order either). Invariants:
/// no panic; subscriptions within their bound; the frames it makes for the
/// router are frames that parse.
pub fn nats_session(data: &[u8]) {
    use tickwire_nats::session::{After, NatsSession, SUBSCRIPTIONS_MAX};
    use tickwire_wire::ClientFrame;
    let limits = Limits { max_control_line: 256, max_payload: 4096 };
    let mut s = NatsSession::new();
    let (mut out, mut frames) = (Vec::new(), Vec::new());
    // Chunks: [kind][len][bytes]; kind even: client bytes, odd: a router frame.
    let mut rest = data;
    while rest.len() >= 2 {
        let (kind, len) = (rest[0], usize::from(rest[1]));
        let chunk = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + chunk.len()..];
        if kind % 2 == 0 {
            let mut at = 0;
            while let Ok(Some((op, n))) = parse(&chunk[at..], &limits) {
                at += n;
                if s.handle_op(op, &mut frames, &mut out).is_err() {
                    return;
                }
            }
        } else if let Ok(f) = ClientFrame::new_checked(chunk) {
            match s.handle_frame(&f, &mut out) {
                After::Frames(fs) => frames.extend(fs),
                After::Close => return,
                After::Nothing => {}
            }
        }
        for f in frames.drain(..) {
            ClientFrame::new_checked(&f).expect("a frame made for the router parses");
        }
        assert!(s.subscriptions() <= SUBSCRIPTIONS_MAX);
        out.clear();
    }
}
