//! Property tests: emit→parse round trips, and arbitrary bytes never panic.
//!
//! `TICKWIRE_FUZZ_CASES` sets the case count of the never-panic properties
//! (default 1,000,000; CI runs the default).

use proptest::prelude::*;
use tickwire_wire::data::PadRepr;
use tickwire_wire::*;

fn fuzz_cases() -> u32 {
    std::env::var("TICKWIRE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

/// An owned frame description that proptest can generate; borrowed into a
/// `FrameRepr` for the test.
#[derive(Debug, Clone)]
enum Owned {
    Pad(u32, u32, u64, usize),
    Data(u32, u32, u64, u8, String, Vec<u8>),
    Nak(u32, u32, u64, u32, u32),
    Status(u32, u32, u8, u64, u32, u32),
    Error(u32, u32, u32, String),
    Setup(u32, u32, u64, u32, u32),
    Heartbeat(u32, u32, u8, u64, u64),
    Auth(u32, u32, u8, u64, u64, u32, [u8; 24]),
}

impl Owned {
    fn repr(&self) -> FrameRepr<'_> {
        match self {
            Owned::Pad(s, t, p, l) => {
                FrameRepr::Pad(PadRepr { session_id: *s, stream_id: *t, position: *p, length: *l })
            }
            Owned::Data(s, t, p, f, topic, payload) => {
                FrameRepr::Data(DataRepr { session_id: *s, stream_id: *t, position: *p, flags: *f, topic, payload })
            }
            Owned::Nak(s, t, p, l, r) => {
                FrameRepr::Nak(NakRepr { session_id: *s, stream_id: *t, position: *p, length: *l, receiver_id: *r })
            }
            Owned::Status(s, t, f, p, w, r) => FrameRepr::Status(StatusRepr {
                session_id: *s,
                stream_id: *t,
                flags: *f,
                consumption_position: *p,
                receiver_window: *w,
                receiver_id: *r,
            }),
            Owned::Error(s, t, c, m) => {
                FrameRepr::Error(ErrorRepr { session_id: *s, stream_id: *t, error_code: *c, message: m })
            }
            Owned::Setup(s, t, p, m, x) => FrameRepr::Setup(SetupRepr {
                session_id: *s,
                stream_id: *t,
                initial_position: *p,
                mtu: *m,
                max_message: *x,
            }),
            Owned::Heartbeat(s, t, f, p, r) => FrameRepr::Heartbeat(HeartbeatRepr {
                session_id: *s,
                stream_id: *t,
                flags: *f,
                position: *p,
                retained_from: *r,
            }),
            Owned::Auth(s, t, f, q, c, o, m) => FrameRepr::Auth(AuthRepr {
                session_id: *s,
                flags: *f,
                stream_id: *t,
                sequence: *q,
                challenge: *c,
                origin: *o,
                mac: *m,
            }),
        }
    }
}

fn owned() -> impl Strategy<Value = Owned> {
    let id = any::<u32>();
    prop_oneof![
        (id, id, any::<u64>(), 32usize..2048).prop_map(|(s, t, p, l)| Owned::Pad(s, t, p, l)),
        (id, id, any::<u64>(), any::<u8>(), "[a-z0-9/*>]{0,64}", prop::collection::vec(any::<u8>(), 0..2048))
            .prop_map(|(s, t, p, f, topic, pl)| Owned::Data(s, t, p, f, topic, pl)),
        (id, id, any::<u64>(), 1u32.., id).prop_map(|(s, t, p, l, r)| Owned::Nak(s, t, p, l, r)),
        (id, id, any::<u8>(), any::<u64>(), id, id).prop_map(|(s, t, f, p, w, r)| Owned::Status(s, t, f, p, w, r)),
        (id, id, id, "\\PC{0,80}").prop_map(|(s, t, c, m)| Owned::Error(s, t, c, m)),
        (id, id, any::<u64>(), 32u32.., id).prop_map(|(s, t, p, m, x)| Owned::Setup(s, t, p, m, x)),
        (id, id, any::<u8>(), any::<u64>(), any::<u64>()).prop_map(|(s, t, f, p, r)| Owned::Heartbeat(
            s,
            t,
            f,
            p,
            r.min(p)
        )),
        (id, id, any::<u8>(), any::<u64>(), any::<u64>(), id, any::<[u8; 24]>())
            .prop_map(|(s, t, f, q, c, o, m)| Owned::Auth(s, t, f, q, c, o, m)),
    ]
}

/// Bytes that look like a frame header (right version, plausible type and
/// length) followed by garbage, to reach the type-specific checks.
fn near_valid() -> impl Strategy<Value = Vec<u8>> {
    (0u16..9, 0u32..600, any::<u8>(), prop::collection::vec(any::<u8>(), 0..600)).prop_map(
        |(ty, len, flags, mut body)| {
            let mut b = Vec::with_capacity(16 + body.len());
            b.extend_from_slice(&len.to_le_bytes());
            b.push(VERSION);
            b.push(flags);
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(&[0u8; 8]);
            b.append(&mut body);
            b
        },
    )
}

/// Parsing must not panic, and whatever parses must emit back to the same
/// frame (emit is the inverse of parse on the bytes that parse reads).
fn check_bytes(bytes: &[u8]) {
    if let Ok(repr) = FrameRepr::parse(bytes) {
        let mut out = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut out).expect("a parsed frame emits");
        let again = FrameRepr::parse(&out[..n]).expect("an emitted frame parses");
        // PAD bodies are not part of the repr; everything else round-trips.
        assert_eq!(again, repr);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn parse_of_emit_is_identity(frame in owned()) {
        let repr = frame.repr();
        let mut buf = vec![0u8; repr.buffer_len() + 7];
        let n = repr.emit(&mut buf).unwrap();
        prop_assert_eq!(n, repr.buffer_len());
        prop_assert_eq!(FrameRepr::parse(&buf[..n]).unwrap(), repr);
        // Trailing bytes after the frame are ignored.
        prop_assert_eq!(FrameRepr::parse(&buf).unwrap(), repr);
    }

    #[test]
    fn truncated_emits_are_typed_errors(frame in owned(), cut in 0usize..64) {
        let repr = frame.repr();
        let mut buf = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut buf).unwrap();
        let keep = n.saturating_sub(cut + 1);
        prop_assert!(FrameRepr::parse(&buf[..keep]).is_err());
        let mut short = vec![0u8; keep];
        let too_small = matches!(repr.emit(&mut short), Err(WireError::BufferTooSmall { .. }));
        prop_assert!(too_small);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_bytes(&bytes);
    }

    #[test]
    fn near_valid_bytes_never_panic(bytes in near_valid()) {
        check_bytes(&bytes);
    }
}
