//! A byte stream that is plain TCP or TLS (`rustls`, the `ring` provider),
//! for the router's client connections: [`Wire`] reads and writes through
//! `&Wire` as through `&TcpStream`, so the framing above
//! ([`FrameReader`](crate::framing::FrameReader), the router's queues) does
//! not know which it has.
//!
//! Non-blocking throughout: a read that needs more TLS records than the
//! socket holds, or a write whose records the socket cannot take yet, is
//! `WouldBlock`, as on a plain socket. Records a write left unsent go out on
//! the next read or write, or with [`Wire::flush_tls`]; [`Wire::wants_write`]
//! says whether any wait. The handshake happens on the first reads and
//! writes, in whatever order the two ends make them.
//!
//! Its layers, one file each:
//! * `setup`: configurations from PEM files: [`server_config`] (with a
//!   client CA, mutual TLS: a client must show a certificate the CA
//!   signed), [`client_config`] (with a certificate and key of its own for
//!   such a router), and [`certificate_user`], the user a client
//!   certificate names ([`Wire::peer_user`]).
//! * `peer`: [`peer_configs`], both ends of a link between peers of one
//!   deployment (a router cluster), each showing a certificate the other
//!   checks against one CA; the name it must hold is the protocol's check.
//! * `secret`: [`read_secret`] reads a file only its owner may read (a
//!   TLS private key, a client's password file, a reliable-UDP auth key),
//!   the one check of its mode for all of them; a certificate is public
//!   and read as it is. [`expiry_warnings`] says which certificates of a
//!   chain have expired or expire within [`EXPIRY_WARNING_DAYS`].

mod peer;
mod secret;
mod setup;

use rustls::pki_types::ServerName;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};

pub use peer::{peer_configs, PeerTls};
pub use rustls::{ClientConfig, ServerConfig};
pub use secret::{expiry_warnings, read_secret, SecretError, EXPIRY_WARNING_DAYS};
pub use setup::{certificate_user, client_config, server_config, TlsError};

/// A connection's byte stream: plain, or TLS over it.
#[derive(Debug)]
pub struct Wire {
    stream: TcpStream,
    tls: Option<Mutex<rustls::Connection>>,
}

impl Wire {
    /// Plain TCP.
    pub fn plain(stream: TcpStream) -> Self {
        Self { stream, tls: None }
    }

    /// The server's end of a TLS connection.
    ///
    /// # Errors
    /// [`TlsError::Config`] if rustls refuses the configuration.
    pub fn tls_server(stream: TcpStream, cfg: &Arc<ServerConfig>) -> Result<Self, TlsError> {
        let c = rustls::ServerConnection::new(Arc::clone(cfg)).map_err(|e| TlsError::Config(e.to_string()))?;
        Ok(Self { stream, tls: Some(Mutex::new(c.into())) })
    }

    /// The client's end of a TLS connection to `server_name` (the name its
    /// certificate must hold).
    ///
    /// # Errors
    /// [`TlsError::Config`] for a bad name or configuration.
    pub fn tls_client(stream: TcpStream, cfg: &Arc<ClientConfig>, server_name: &str) -> Result<Self, TlsError> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| TlsError::Config(format!("server name {server_name:?}: {e}")))?;
        let c = rustls::ClientConnection::new(Arc::clone(cfg), name).map_err(|e| TlsError::Config(e.to_string()))?;
        Ok(Self { stream, tls: Some(Mutex::new(c.into())) })
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Whether this is TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The user the peer's certificate names ([`certificate_user`]), once
    /// the handshake has brought one: a client's, on a server that asks
    /// for client certificates (mutual TLS). `None` on plain TCP, before
    /// the handshake, or for a certificate that names nobody.
    pub fn peer_user(&self) -> Option<String> {
        let c = self.lock()?;
        certificate_user(c.peer_certificates()?.first()?)
    }

    fn lock(&self) -> Option<MutexGuard<'_, rustls::Connection>> {
        // A panic while holding it leaves a connection no worse than the
        // error that caused it: keep using it.
        self.tls.as_ref().map(|m| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// TLS records wait to be written.
    pub fn wants_write(&self) -> bool {
        self.lock().is_some_and(|c| c.wants_write())
    }

    /// Writes waiting TLS records as far as the socket takes them.
    ///
    /// # Errors
    /// The socket failed (not would-block).
    pub fn flush_tls(&self) -> std::io::Result<()> {
        match self.lock() {
            Some(mut c) => send_records(&mut c, &self.stream),
            None => Ok(()),
        }
    }
}

/// A socket written with `MSG_NOSIGNAL`: a peer gone is `EPIPE`, never a
/// SIGPIPE (rustls writes its records with `write_vectored`, which on a
/// `TcpStream` is a plain `writev`).
struct NoSignal<'a>(&'a TcpStream);

impl Write for NoSignal<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        socket2::SockRef::from(self.0).send_with_flags(buf, libc::MSG_NOSIGNAL)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        socket2::SockRef::from(self.0).send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn send_records(c: &mut rustls::Connection, stream: &TcpStream) -> std::io::Result<()> {
    while c.wants_write() {
        match c.write_tls(&mut NoSignal(stream)) {
            Ok(0) => return Err(std::io::Error::new(ErrorKind::WriteZero, "tls: the socket took nothing")),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Read for &Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(mut c) = self.lock() else { return (&self.stream).read(buf) };
        loop {
            match c.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // No plaintext buffered: more records from the socket.
            match c.read_tls(&mut &self.stream) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    let state = c.process_new_packets().map_err(|e| {
                        // Tell the peer why before giving up (best effort).
                        let _ = send_records(&mut c, &self.stream);
                        std::io::Error::new(ErrorKind::InvalidData, format!("tls: {e}"))
                    })?;
                    // Handshake replies, key updates.
                    send_records(&mut c, &self.stream)?;
                    if state.peer_has_closed() && state.plaintext_bytes_to_read() == 0 {
                        return Ok(0);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for &Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    /// One `sendmsg` on plain TCP (a `writev` with `MSG_NOSIGNAL`: a peer
    /// gone is `EPIPE`, never a SIGPIPE, which the command line leaves at
    /// its default, death); over TLS, every slice into records, then the
    /// records out in as few writes as the socket allows.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        let Some(mut c) = self.lock() else { return NoSignal(&self.stream).write_vectored(bufs) };
        // Records still waiting go first; while the socket cannot take
        // them, take no more plaintext (the caller keeps it, as it would
        // for a full socket).
        send_records(&mut c, &self.stream)?;
        if c.wants_write() {
            return Err(ErrorKind::WouldBlock.into());
        }
        let n = c.writer().write_vectored(bufs)?;
        send_records(&mut c, &self.stream)?;
        // Before the handshake ends rustls buffers a bounded amount of
        // plaintext, then takes none: that is a full buffer, not a closed
        // connection (`Ok(0)` would say so to every caller).
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_tls()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        for x in [&c, &s] {
            x.set_nonblocking(true).unwrap();
        }
        (c, s)
    }

    /// Moves `msg` from `a` to `b`, driving both (the handshake included).
    fn carry(a: &Wire, b: &Wire, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        let start = Instant::now();
        let (mut sent, mut got) = (0, Vec::new());
        while got.len() < msg.len() {
            if start.elapsed() > Duration::from_secs(5) {
                return Err(ErrorKind::TimedOut.into());
            }
            if sent < msg.len() {
                match (&*a).write(&msg[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            let mut buf = [0u8; 4096];
            for w in [a, b] {
                match (&*w).read(&mut buf) {
                    Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                    Ok(n) if std::ptr::eq(w, b) => got.extend_from_slice(&buf[..n]),
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(got)
    }

    /// Issue 43, bug 2: more plaintext than rustls buffers before the
    /// handshake ends made `write` return `Ok(0)`, which every caller reads
    /// as "the peer closed"; the client reconnected for ever. A write takes
    /// some bytes or would block, and everything arrives once the
    /// handshake is done.
    #[test]
    fn a_write_larger_than_the_handshake_buffer_would_block_and_then_goes() {
        let dir = std::env::temp_dir().join(format!("tw-tls-early-{}", std::process::id()));
        let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
        let (c, s) = pair();
        let client = Wire::tls_client(c, &client_config(&cert, None).unwrap(), "localhost").unwrap();
        let server = Wire::tls_server(s, &server_config(&cert, &key, None).unwrap()).unwrap();
        let msg: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        loop {
            match (&client).write(&msg[sent..]) {
                Ok(0) => panic!("write took nothing after {sent} bytes: read as a closed connection"),
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(sent > 0 && sent < msg.len(), "{sent} bytes taken before the handshake");
        // Both ends driven: the handshake ends, the rest goes.
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < msg.len() {
            assert!(start.elapsed() < Duration::from_secs(5), "{} of {} bytes arrived", got.len(), msg.len());
            if sent < msg.len() {
                match (&client).write(&msg[sent..]) {
                    Ok(0) => panic!("write took nothing"),
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
            let mut buf = [0u8; 16384];
            let _ = (&client).read(&mut buf);
            match (&server).read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(got == msg, "the bytes arrive whole and in order");
    }

    #[test]
    fn both_ways_over_tls_and_plain_alike() {
        let dir = std::env::temp_dir().join(format!("tw-tls-{}", std::process::id()));
        let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
        let (c, s) = pair();
        let client = Wire::tls_client(c, &client_config(&cert, None).unwrap(), "localhost").unwrap();
        let server = Wire::tls_server(s, &server_config(&cert, &key, None).unwrap()).unwrap();
        let big = vec![7u8; 300_000];
        assert_eq!(carry(&client, &server, b"hello").unwrap(), b"hello");
        assert_eq!(carry(&server, &client, &big).unwrap(), big);
        let (c, s) = pair();
        let (a, b) = (Wire::plain(c), Wire::plain(s));
        assert_eq!(carry(&a, &b, b"plain").unwrap(), b"plain");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_certificate_for_another_name_or_a_plain_peer_is_an_error_not_a_hang() {
        let dir = std::env::temp_dir().join(format!("tw-tls-bad-{}", std::process::id()));
        let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
        let (c, s) = pair();
        let client = Wire::tls_client(c, &client_config(&cert, None).unwrap(), "example.com").unwrap();
        let server = Wire::tls_server(s, &server_config(&cert, &key, None).unwrap()).unwrap();
        let e = carry(&client, &server, b"x").unwrap_err();
        assert!(e.to_string().contains("tls") || e.kind() == ErrorKind::UnexpectedEof, "{e}");
        // A plain client talking to a TLS server.
        let (c, s) = pair();
        let server = Wire::tls_server(s, &server_config(&cert, &key, None).unwrap()).unwrap();
        let e = carry(&Wire::plain(c), &server, b"GET / HTTP/1.0\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("tls"), "{e}");
        let e = server_config(&dir.join("missing.pem"), &key, None).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Mutual TLS: a client showing a certificate the configured CA signed
    /// gets through the handshake, and the server reads the user it names;
    /// a client showing none, or one another CA signed, is refused by the
    /// handshake with the reason (rustls's alert), not a hang.
    #[test]
    fn mutual_tls_takes_the_cas_clients_and_refuses_the_others() {
        use tickwire_testkit::ca::TestCa;
        let dir = std::env::temp_dir().join(format!("tw-tls-mutual-{}", std::process::id()));
        let (ca, other) = (TestCa::new(&dir, "ca"), TestCa::new(&dir, "other-ca"));
        let (cert, key) = ca.server("router");
        let server_cfg = server_config(&cert, &key, Some(&ca.pem)).unwrap();
        let (desk, desk_key) = ca.client("desk", "desk");
        let (rogue, rogue_key) = other.client("rogue", "desk");
        let client = |identity: Option<(&std::path::Path, &std::path::Path)>| {
            let (c, s) = pair();
            let client = Wire::tls_client(c, &client_config(&ca.pem, identity).unwrap(), "localhost").unwrap();
            (client, Wire::tls_server(s, &server_cfg).unwrap())
        };
        let (c, s) = client(Some((&desk, &desk_key)));
        assert_eq!(carry(&c, &s, b"hello").unwrap(), b"hello");
        assert_eq!(s.peer_user().as_deref(), Some("desk"), "the server reads the user its certificate names");
        assert_eq!(c.peer_user().as_deref(), Some("localhost"), "the client's side: the router's certificate (no CN)");
        // Whichever end fails first says why: the server ("peer sent no
        // certificates", "invalid peer certificate: UnknownIssuer") or the
        // client (the server's alert: CertificateRequired, UnknownCA).
        for (who, identity, why) in [
            ("no certificate", None, ["no certificates", "CertificateRequired"]),
            ("another CA's", Some((rogue.as_path(), rogue_key.as_path())), ["UnknownIssuer", "UnknownCA"]),
        ] {
            let (c, s) = client(identity);
            let e = carry(&c, &s, b"hello").unwrap_err().to_string();
            println!("{who}: {e}");
            assert!(e.contains("tls") && why.iter().any(|w| e.contains(w)), "{who}: {e}");
            assert_eq!(s.peer_user(), None, "{who}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Peers of one deployment: each shows a certificate the other checks
    /// against the CA, whichever end dialed, and the name dialed (an
    /// address the certificate does not hold) is not checked; anything
    /// else the chain check finds still is: another CA, at either end, or
    /// a certificate not for a server at the dialed end.
    #[test]
    fn peers_check_each_others_chain_but_not_the_name_dialed() {
        use tickwire_testkit::ca::{TestCa, Usage};
        let dir = std::env::temp_dir().join(format!("tw-tls-peer-{}", std::process::id()));
        let (ca, other) = (TestCa::new(&dir, "cluster-ca"), TestCa::new(&dir, "other-ca"));
        let peer = |ca: &TestCa, file: &str, usage: Usage| {
            let (c, k) = ca.issue(file, usage, Some(file), &[], &[]);
            peer_configs(&c, &k, &ca.pem).unwrap()
        };
        let link = |dialer: &PeerTls, dialed: &PeerTls| {
            let (c, s) = pair();
            let c = Wire::tls_client(c, &dialer.client, "10.9.8.7").unwrap();
            let s = Wire::tls_server(s, &dialed.server).unwrap();
            let there = carry(&c, &s, b"hello from the dialer");
            let back = there.as_ref().ok().map(|_| carry(&s, &c, b"and back"));
            (there.map(|_| ()), back, c, s)
        };
        let (a, b) = (peer(&ca, "a", Usage::Peer), peer(&ca, "b", Usage::Peer));
        let (there, back, c, s) = link(&a, &b);
        assert!(there.is_ok() && back.is_some_and(|r| r.is_ok()), "{there:?}");
        assert_eq!((c.peer_user().as_deref(), s.peer_user().as_deref()), (Some("b"), Some("a")));
        let foreign = peer(&other, "f", Usage::Peer);
        // Signed by another CA but trusting ours: only the other end's
        // check can refuse it.
        let (fc, fk) = other.issue("f-trusting-ours", Usage::Peer, Some("f"), &[], &[]);
        let impostor = peer_configs(&fc, &fk, &ca.pem).unwrap();
        for (dialer, dialed, what) in [
            (&impostor, &b, "a dialer another CA signed (refused by the dialed end)"),
            (&a, &impostor, "a dialed end another CA signed (refused by the dialer)"),
            (&foreign, &b, "a dialer of another CA"),
        ] {
            let (there, back, _, _) = link(dialer, dialed);
            let refused = there.is_err() || back.is_some_and(|r| r.is_err());
            assert!(refused, "{what} was linked");
        }
        let client_only = peer(&ca, "c", Usage::Client);
        let (there, _, _, _) = link(&a, &client_only);
        assert!(there.is_err_and(|e| e.to_string().contains("tls: ")), "a dialed end without serverAuth was linked");
        let _ = std::fs::remove_dir_all(dir);
    }
}
