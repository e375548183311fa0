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
//! Secrets on disk: [`read_secret`] reads a file only its owner may read
//! (a TLS private key here, a client's password file, a reliable-UDP auth
//! key), the one check of its mode for all of them; a certificate is
//! public and read as it is. [`expiry_warnings`] says which certificates
//! of a chain have expired or expire within [`EXPIRY_WARNING_DAYS`].

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use zeroize::Zeroizing;

pub use rustls::{ClientConfig, ServerConfig};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read or holds no PEM item.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// rustls refused the configuration or the server name.
    #[error("tls: {0}")]
    Config(String),
}

/// Why a secret file (a private key, a password, an auth key) was not read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Its group or others have some access to it.
    #[error("{} by others (mode {mode:03o}): chmod 600 {path}", if mode & 0o044 != 0 { "readable" } else { "open" })]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// It could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads a secret: a file its owner alone may access (mode 600 or 400; any
/// bit for the group or others is refused, naming the file, its mode and
/// `chmod 600 FILE`). The mode is that of the file opened, so it cannot be
/// swapped between the check and the read. The bytes are zeroed when the
/// buffer is dropped (read at their final size, so no copy is left behind
/// by a growing buffer).
///
/// # Errors
/// [`SecretError::Exposed`], or the file could not be read.
pub fn read_secret(path: &Path) -> Result<Zeroizing<Vec<u8>>, SecretError> {
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Exposed { path: path.display().to_string(), mode });
    }
    let size = usize::try_from(meta.len()).unwrap_or(0).min(1 << 20);
    let mut buf = Zeroizing::new(Vec::with_capacity(size + 1));
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// A certificate expiring within this many days is warned about.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// What is wrong with the expiry dates of `chain` (from `path`) at `now`
/// (seconds since the epoch): one line per certificate expired or expiring
/// within [`EXPIRY_WARNING_DAYS`], naming the file and the date. A
/// certificate whose date cannot be read is left to rustls.
fn expiry_lines(path: &Path, chain: &[CertificateDer<'_>], now: i64) -> Vec<String> {
    let mut out = Vec::new();
    for (i, der) in chain.iter().enumerate() {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { continue };
        let not_after = cert.validity().not_after;
        let left = not_after.timestamp() - now;
        if left > EXPIRY_WARNING_DAYS * 86_400 {
            continue;
        }
        let t = not_after.to_datetime();
        let date = format!("{} {:02}:{:02}:{:02} UTC", t.date(), t.hour(), t.minute(), t.second());
        let which = match i {
            0 => format!("certificate {}", path.display()),
            _ => format!("certificate {} of the chain in {}", i + 1, path.display()),
        };
        out.push(if left <= 0 {
            format!("{which} expired on {date}: clients refuse it; renew it")
        } else {
            let days = left / 86_400;
            format!("{which} expires on {date} (in {days} day{}): renew it", if days == 1 { "" } else { "s" })
        });
    }
    out
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Warnings for the certificates in `cert` (PEM) that have expired or
/// expire within [`EXPIRY_WARNING_DAYS`]: what [`server_config`] logs, for
/// `tickwire router --check-config` to print.
///
/// # Errors
/// [`TlsError::File`]: the file cannot be read or holds no certificate.
pub fn expiry_warnings(cert: &Path) -> Result<Vec<String>, TlsError> {
    Ok(expiry_lines(cert, &certs(cert)?, now()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = |why: String| TlsError::File { path: path.display().to_string(), why };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(e.to_string()))?;
    if certs.is_empty() {
        return Err(file("no certificate (PEM) in it".into()));
    }
    Ok(certs)
}

/// A server configuration from a certificate chain and its private key
/// (PEM files), TLS 1.2 and 1.3, no client certificates. The key must be
/// its owner's alone ([`read_secret`]); a certificate expired or expiring
/// soon is warned about (`tracing`, [`expiry_warnings`]).
///
/// # Errors
/// [`TlsError`] naming the file, or what rustls refused.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certs(cert)?;
    for w in expiry_lines(cert, &chain, now()) {
        tracing::warn!("{w}");
    }
    let file = |why: String| TlsError::File { path: key.display().to_string(), why };
    let pem = read_secret(key).map_err(|e| file(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| file(e.to_string()))?;
    let cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(Arc::new(cfg))
}

/// A client configuration trusting the certificates in `ca` (PEM).
///
/// # Errors
/// [`TlsError`] naming the file, or what rustls refused.
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c).map_err(|e| TlsError::Config(format!("{}: {e}", ca.display())))?;
    }
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

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

fn send_records(c: &mut rustls::Connection, mut stream: &TcpStream) -> std::io::Result<()> {
    while c.wants_write() {
        match c.write_tls(&mut stream) {
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

    /// One `writev` on plain TCP; over TLS, every slice into records, then
    /// the records out in as few writes as the socket allows.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        let Some(mut c) = self.lock() else { return (&self.stream).write_vectored(bufs) };
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
        let client = Wire::tls_client(c, &client_config(&cert).unwrap(), "localhost").unwrap();
        let server = Wire::tls_server(s, &server_config(&cert, &key).unwrap()).unwrap();
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

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Issue 44 item 5: a private key its group or others may read is
    /// refused, naming the file, its mode and the fix; the certificate,
    /// which is public, is not.
    #[test]
    fn a_key_readable_by_others_is_refused_by_name_and_a_certificate_is_not() {
        let dir = std::env::temp_dir().join(format!("tw-tls-mode-{}", std::process::id()));
        let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
        set_mode(&key, 0o600);
        set_mode(&cert, 0o644);
        assert!(server_config(&cert, &key).is_ok(), "a 0600 key and a 0644 certificate");
        set_mode(&key, 0o400);
        assert!(server_config(&cert, &key).is_ok(), "a 0400 key");
        for (mode, what) in
            [(0o644, "readable by others (mode 644)"), (0o640, "mode 640"), (0o620, "open by others (mode 620)")]
        {
            set_mode(&key, mode);
            let e = server_config(&cert, &key).unwrap_err().to_string();
            let fix = format!("chmod 600 {}", key.display());
            assert!(e.starts_with(&key.display().to_string()) && e.contains(what) && e.ends_with(&fix), "{e}");
        }
        set_mode(&key, 0o600);
        let e = read_secret(&dir.join("absent.key")).unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
        assert_eq!(&read_secret(&key).unwrap()[..10], b"-----BEGIN");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A certificate for localhost valid until `not_after` (seconds since
    /// the epoch), made by rcgen and written to `dir/name.pem`, with its key
    /// (0600) in `dir/name.key`.
    fn certificate_until(dir: &Path, name: &str, not_after: u64) -> (std::path::PathBuf, std::path::PathBuf) {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(not_after);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let (c, k) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        set_mode(&k, 0o600);
        (c, k)
    }

    /// Issue 44 item 5: a certificate expired, or expiring within 30 days,
    /// is warned about, naming the file and the date; the router still
    /// starts with it (the clients are the ones to refuse it).
    #[test]
    fn an_expired_or_expiring_certificate_is_warned_about_with_its_date() {
        let dir = std::env::temp_dir().join(format!("tw-tls-expiry-{}", std::process::id()));
        let now = u64::try_from(now()).unwrap();
        // 2021-01-01 00:00:00 UTC.
        let (old, old_key) = certificate_until(&dir, "old", 1_609_459_200);
        let w = expiry_warnings(&old).unwrap();
        assert_eq!(
            w,
            [format!("certificate {} expired on 2021-01-01 00:00:00 UTC: clients refuse it; renew it", old.display())]
        );
        assert!(server_config(&old, &old_key).is_ok(), "a warning, not a refusal");
        let (soon, _) = certificate_until(&dir, "soon", now + 10 * 86_400 + 3600);
        let w = expiry_warnings(&soon).unwrap();
        assert!(w.len() == 1 && w[0].contains(&soon.display().to_string()) && w[0].contains("(in 10 days)"), "{w:?}");
        let (later, _) = certificate_until(&dir, "later", now + 31 * 86_400);
        assert!(expiry_warnings(&later).unwrap().is_empty());
        // A chain: the second one's expiry is named as such.
        let chain = dir.join("chain.pem");
        let pem = |p: &Path| std::fs::read_to_string(p).unwrap();
        std::fs::write(&chain, pem(&later) + &pem(&old)).unwrap();
        let w = expiry_warnings(&chain).unwrap();
        assert!(w.len() == 1 && w[0].starts_with("certificate 2 of the chain in "), "{w:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn both_ways_over_tls_and_plain_alike() {
        let dir = std::env::temp_dir().join(format!("tw-tls-{}", std::process::id()));
        let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
        let (c, s) = pair();
        let client = Wire::tls_client(c, &client_config(&cert).unwrap(), "localhost").unwrap();
        let server = Wire::tls_server(s, &server_config(&cert, &key).unwrap()).unwrap();
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
        let client = Wire::tls_client(c, &client_config(&cert).unwrap(), "example.com").unwrap();
        let server = Wire::tls_server(s, &server_config(&cert, &key).unwrap()).unwrap();
        let e = carry(&client, &server, b"x").unwrap_err();
        assert!(e.to_string().contains("tls") || e.kind() == ErrorKind::UnexpectedEof, "{e}");
        // A plain client talking to a TLS server.
        let (c, s) = pair();
        let server = Wire::tls_server(s, &server_config(&cert, &key).unwrap()).unwrap();
        let e = carry(&Wire::plain(c), &server, b"GET / HTTP/1.0\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("tls"), "{e}");
        let e = server_config(&dir.join("missing.pem"), &key).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
