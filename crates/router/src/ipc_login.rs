//! Shared-memory clients log in over a Unix socket, `DIR/router.sock`.
//!
//! A client creates its log into the router (`tw-router-in-ID`) in a
//! sealed anonymous file (`memfd`, [`tickwire_shm::handover`]), then
//! connects here and sends one message, `[u32 length][u32 ID][HELLO]`,
//! little-endian, the length counting what follows it, with the log's
//! descriptor beside its first bytes (`SCM_RIGHTS`). The router learns the
//! client's process and user from the socket (`SO_PEERCRED`), checks that
//! the file is sealed against shrinking and that the log's publisher is
//! that process, attaches to it, and handles the HELLO as the session's
//! first frame: its password, when it has one, crossed this socket and is
//! never in shared memory, and a client whose Unix user a `[[users]]`
//! entry names (`unix_user`) logs in as that user with none. A HELLO
//! arriving later through the log is a protocol violation. A login taken
//! is answered with one zero byte and, beside it, the router's log to the
//! client (`tw-router-out-ID`), sealed the same way: neither log has a
//! name in the directory, so a client needs no right to it beyond the
//! socket's, and neither side can shrink the other's mapping.
//!
//! Every wait has a deadline (`limits.hello_timeout`), every buffer a
//! bound (`max_frame`), and the pending connections a limit; each refusal
//! is logged (at most a line a second) and counted, and the client is told
//! why on the socket before it is closed. The socket is `0600` (`0660`
//! with the directory's group) in a directory that is the router's own.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use tickwire_shm::handover;

/// The socket's name in the router's directory.
pub use tickwire_wire::client::IPC_LOGIN_SOCKET as SOCKET_FILE;

/// Connections that have not yet sent their message, at most.
const MAX_PENDING: usize = 256;

/// A login that came whole: the client's log to attach, its HELLO, and
/// who it is.
#[derive(Debug)]
pub(crate) struct Request {
    /// The id of its log (`tw-router-in-ID`).
    pub stream: u32,
    /// Its log, handed over (not yet checked).
    pub log: File,
    /// Its HELLO frame.
    pub hello: Vec<u8>,
    /// Its process and user, from the socket.
    pub pid: i32,
    pub uid: u32,
    /// The connection, to refuse on ([`refuse`]) or drop.
    pub conn: UnixStream,
}

/// A connection whose message is not all here yet.
struct Pending {
    conn: UnixStream,
    pid: i32,
    uid: u32,
    buf: Vec<u8>,
    /// Descriptors that came with it (one is a log; more is a refusal).
    fds: Vec<OwnedFd>,
    deadline: u64,
}

/// The login socket and its pending connections.
pub(crate) struct IpcLogin {
    listener: UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file this router made: what it removes.
    made: (u64, u64),
    pending: Vec<Pending>,
    /// The longest message taken (a HELLO of `max_frame` and its prefix).
    max_message: usize,
    timeout_ns: u64,
    /// Refusals since start (bad or late messages, too many pending).
    pub(crate) refused: u64,
    last_log: u64,
    unlogged: u64,
}

impl IpcLogin {
    /// Makes `DIR/router.sock` (a stale one from an earlier router of this
    /// directory, whose lock this router now holds, is replaced; anything
    /// else by that name is refused), mode `mode`.
    ///
    /// # Errors
    /// What binding or setting the mode failed with, or a file by that name
    /// that is not a socket of this user's.
    pub fn bind(dir: &Path, mode: u32, max_frame: usize, timeout_ns: u64) -> std::io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let path = dir.join(SOCKET_FILE);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() && m.uid() == nix::unistd::geteuid().as_raw() => {
                std::fs::remove_file(&path)?;
            }
            Ok(m) => {
                return Err(std::io::Error::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket of this user's (uid {}): left alone",
                        path.display(),
                        m.uid()
                    ),
                ))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        listener.set_nonblocking(true)?;
        let m = std::fs::symlink_metadata(&path)?;
        Ok(Self {
            listener,
            path,
            made: (m.dev(), m.ino()),
            pending: Vec::new(),
            max_message: max_frame + 8,
            timeout_ns,
            refused: 0,
            last_log: 0,
            unlogged: 0,
        })
    }

    /// Takes new connections, reads the pending ones, and ends those past
    /// their deadline; puts the logins that came whole in `out`.
    pub fn poll(&mut self, now: u64, out: &mut Vec<Request>) {
        loop {
            match self.listener.accept() {
                Ok((conn, _)) => self.adopt(conn, now),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // WouldBlock, or a failure (EMFILE) that the next poll retries.
                Err(_) => break,
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            match self.read(i) {
                Ok(Some((stream, hello))) => {
                    let Pending { conn, pid, uid, mut fds, .. } = self.pending.swap_remove(i);
                    match (fds.pop(), fds.is_empty()) {
                        (Some(fd), true) => out.push(Request { stream, log: File::from(fd), hello, pid, uid, conn }),
                        (None, _) => self.refuse_pending(conn, "no log came with the login message", now),
                        (Some(_), false) => self.refuse_pending(conn, "more than one file came with the login", now),
                    }
                }
                Ok(None) if now < self.pending[i].deadline => i += 1,
                Ok(None) => {
                    let p = self.pending.swap_remove(i);
                    self.refuse_pending(p.conn, "no whole login message within limits.hello_timeout", now);
                }
                Err(why) => {
                    let p = self.pending.swap_remove(i);
                    self.refuse_pending(p.conn, &why, now);
                }
            }
        }
    }

    fn adopt(&mut self, conn: UnixStream, now: u64) {
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        if self.pending.len() >= MAX_PENDING {
            self.refuse_pending(conn, "too many shared-memory logins at once", now);
            return;
        }
        let cred = match getsockopt(&conn.as_fd(), PeerCredentials) {
            Ok(c) => c,
            Err(e) => return self.refuse_pending(conn, &format!("no peer credentials: {e}"), now),
        };
        if conn.set_nonblocking(true).is_err() {
            return;
        }
        self.pending.push(Pending {
            conn,
            pid: cred.pid(),
            uid: cred.uid(),
            buf: Vec::new(),
            fds: Vec::new(),
            deadline: now + self.timeout_ns,
        });
    }

    /// Reads what pending connection `i` sent; its log's id and HELLO once
    /// whole.
    fn read(&mut self, i: usize) -> Result<Option<(u32, Vec<u8>)>, String> {
        let max = self.max_message;
        let p = &mut self.pending[i];
        let mut chunk = [0u8; 4096];
        loop {
            let want = match p.buf.get(..4) {
                Some(h) => 4 + u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize,
                None => 4,
            };
            if want > max + 4 {
                return Err(format!("a login message of {} bytes (at most {max})", want - 4));
            }
            if p.buf.len() >= want && want > 4 {
                if want < 8 + tickwire_wire::client::HEADER_LEN {
                    return Err("a login message too short for a stream id and a HELLO".into());
                }
                let stream = u32::from_le_bytes([p.buf[4], p.buf[5], p.buf[6], p.buf[7]]);
                return Ok(Some((stream, p.buf[8..want].to_vec())));
            }
            let n = (want - p.buf.len()).min(chunk.len());
            match handover::recv(&p.conn, &mut chunk[..n], &mut p.fds) {
                Ok(0) => return Err("the client closed the login socket before its message was whole".into()),
                Ok(_) if p.fds.len() > 1 => return Err("more than one file came with the login".into()),
                Ok(k) => p.buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the login socket: {e}")),
            }
        }
    }

    fn refuse_pending(&mut self, conn: UnixStream, why: &str, now: u64) {
        refuse(&conn, why);
        self.note_refusal(why, now);
    }

    /// Counts a refusal, and logs it (one line a second at most, with how
    /// many went unlogged).
    pub fn note_refusal(&mut self, why: &str, now: u64) {
        self.refused += 1;
        if now.saturating_sub(self.last_log) >= 1_000_000_000 {
            let more = std::mem::take(&mut self.unlogged);
            tracing::warn!(
                refused = self.refused,
                "shared-memory login refused: {why} (and {more} more since the last line)"
            );
            self.last_log = now;
        } else {
            self.unlogged += 1;
        }
    }
}

impl Drop for IpcLogin {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // Only the socket this router made, if the name still leads to it.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.made) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Tells the client its login was taken: one zero byte (a refusal is
/// text, never starting with one), with the router's log to it beside.
///
/// # Errors
/// When the answer could not be sent (the client is gone, or its socket
/// full): the login is not taken.
pub(crate) fn accept(conn: &UnixStream, log: &File) -> std::io::Result<()> {
    conn.set_nonblocking(true)?;
    match handover::send(conn, &[tickwire_wire::client::IPC_LOGIN_TAKEN], Some(log.as_fd()))? {
        1 => Ok(()),
        _ => Err(ErrorKind::WriteZero.into()),
    }
}

/// Tells the client why it is refused (best effort: it may be gone); the
/// caller then drops the connection.
pub(crate) fn refuse(mut conn: &UnixStream, why: &str) {
    let _ = conn.set_nonblocking(true);
    let _ = conn.write_all(why.as_bytes());
}
