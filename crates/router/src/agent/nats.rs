//! A routing agent's NATS clients ([`crate::nats`]): the `INFO` a new
//! connection gets, and reading: the bytes of one readiness, parsed into
//! operations in place, each made into client frames for the router.

use super::{handle, RoutingAgent};
use crate::nats::NATS_VERSION;
use crate::routing::Disconnect;
use crate::session::Outbound;
use std::io::Read;
use tickwire_nats::encode::Info;
use tickwire_nats::parse::parse;
use tickwire_transport::tls::Wire;
use tickwire_wire::client::{ClientKind, RejectCode};

/// Bytes asked of the socket per read at most.
const READ_BYTES: usize = 64 << 10;

/// Reads per readiness at most; past them the connection is read again
/// next duty cycle (its socket's readiness, edge-triggered, would not say
/// so again).
const READS_PER_READINESS: usize = 8;

impl RoutingAgent {
    /// What a NATS client that will be session `id` is told on connecting.
    pub(super) fn nats_info(&self, wire: &Wire, id: u32) -> Info {
        let local = wire.stream().local_addr().ok();
        Info {
            server_id: format!("tickwire-{}", std::process::id()),
            server_name: self.router.name().to_owned(),
            version: NATS_VERSION.into(),
            proto: 1,
            host: local.map_or_else(String::new, |a| a.ip().to_string()),
            port: local.map_or(0, |a| a.port()),
            headers: true,
            max_payload: crate::nats::nats_max_payload(self.router.limits().max_frame),
            client_id: u64::from(self.router.client_id(id)),
            auth_required: self.router.requires_login(),
            tls_required: wire.is_tls(),
            connect_urls: self.router.other_nats_routers(),
        }
    }

    /// Reads NATS client `id`'s socket until it would block (at most
    /// [`READS_PER_READINESS`] times) and acts on every whole operation
    /// read; returns the operations, and whether bytes may be left in the
    /// socket.
    ///
    /// # Errors
    /// Why the connection ends: the client closed it, a read failed, or it
    /// sent what is not an operation (told as the NATS server's `-ERR`).
    pub(super) fn read_nats(&mut self, id: u32) -> Result<(usize, bool), Disconnect> {
        let mut ops = 0;
        for _ in 0..READS_PER_READINESS {
            match self.read_nats_once(id)? {
                // A read shorter than asked emptied the socket: no second
                // read to hear it would block.
                Some((n, short)) => {
                    ops += n;
                    if short {
                        return Ok((ops, false));
                    }
                }
                None => return Ok((ops, false)),
            }
        }
        Ok((ops, true))
    }

    /// One read: the operations acted on and whether the read was shorter
    /// than asked, or `None` if the socket had nothing.
    fn read_nats_once(&mut self, id: u32) -> Result<Option<(usize, bool)>, Disconnect> {
        let (tcp, router, times, countdown) = (&mut self.tcp, &mut self.router, &self.times, &mut self.countdown);
        let Some(Some(input)) = tcp.get_mut(id as usize) else { return Ok(None) };
        let Some(nin) = input.nats.as_deref_mut() else { return Ok(None) };
        let mut frames = Vec::new();
        let have = nin.filled;
        let room = nin.capacity().saturating_sub(have).min(READ_BYTES);
        if room == 0 {
            return Err(Disconnect::protocol("an operation past the connection's limits"));
        }
        if nin.buf.len() < have + room {
            // Zeroed once, as it grows; reads go into it in place.
            nin.buf.resize(have + room, 0);
        }
        nin.reads += 1;
        let read = (&*input.stream).read(&mut nin.buf[have..have + room]);
        let n = match read {
            Ok(0) => {
                return Err(Disconnect { code: RejectCode::Normal, reason: "the client closed the connection".into() });
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // TLS: handshake replies the read could not send go with
                // the next flush.
                if input.stream.wants_write() {
                    router.mark_pending(id);
                }
                return Ok(None);
            }
            Err(e) => return Err(Disconnect { code: RejectCode::Normal, reason: format!("read: {e}") }),
        };
        nin.filled = have + n;
        nin.bytes_in += n as u64;
        // Plain TCP: a read shorter than asked emptied the socket. (Over
        // TLS, one record's plaintext may be short with more records in
        // the socket: read on until it would block.)
        let short = n < room && !input.stream.is_tls();
        let (mut used, mut ops) = (0, 0);
        let limits = nin.limits;
        let end = nin.filled;
        let result = loop {
            let op = match parse(&nin.buf[used..end], &limits) {
                Ok(Some((op, took))) => {
                    used += took;
                    op
                }
                Ok(None) => break Ok(Some((ops, short))),
                Err(e) => break Err(Disconnect::protocol(e.to_string())),
            };
            ops += 1;
            let Some(Outbound::Nats(out)) = router.session_mut(id).map(crate::Session::outbound_mut) else {
                break Ok(Some((ops, short)));
            };
            let out = &mut **out;
            if let Err(why) = out.session.handle_op(op, &mut frames, &mut out.staged) {
                break Err(Disconnect { code: RejectCode::Normal, reason: why });
            }
            // A client that sends (PINGs) and never reads its answers.
            if out.check_staged() {
                let reason = out.failure().unwrap_or_default().to_owned();
                break Err(Disconnect { code: RejectCode::Limit, reason });
            }
            let mut failed = None;
            for f in frames.drain(..) {
                // Mutual TLS: CONNECT logs in as the certificate's user.
                if f.first() == Some(&(ClientKind::Hello as u8)) {
                    if let Some(user) = input.stream.peer_user() {
                        router.set_certified(id, user);
                    }
                }
                if let Err(d) = handle(router, times, countdown, id, &f) {
                    failed = Some(d);
                    break;
                }
            }
            if let Some(d) = failed {
                break Err(d);
            }
        };
        nin.buf.copy_within(used..end, 0);
        nin.filled = end - used;
        // Its answers (PONG, +OK, -ERR) go with the next flush.
        router.mark_pending(id);
        result
    }
}
