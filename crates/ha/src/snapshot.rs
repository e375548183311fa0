//! Snapshots: what a member whose next entries were compacted away on
//! its leader installs instead of them.
//!
//! The Raft message (`MsgSnapshot`) carries only a [`Manifest`]: the index
//! the snapshot stands for and the application's files (names and
//! lengths), which its leader's application put in a directory of their
//! own ([`crate::Ha::snapshot_ready`]). The follower fetches the files
//! over a connection of its own to the leader's peer port ([`fetch`],
//! [`serve`]), stages them in `snapshots/in-INDEX/` beside its log, and
//! only then steps the message into raft-rs, which installs the snapshot
//! in the log; the application then puts the staged files in place of
//! its state ([`crate::Event::Installed`]).
//!
//! ```text
//! FETCH  0x03 | from: u64 LE | to: u64 LE | index: u64 LE | group: UTF-8
//! FILE   0x04 | length: u64 LE | name: UTF-8    (then its bytes as DATA)
//! DATA   0x05 | bytes (at most DATA_CHUNK)
//! DONE   0x06
//! ```
//!
//! A staged snapshot is complete once its `MANIFEST` file is there (written
//! last, synced, renamed into place): a member that restarts with its log
//! installed past what its application applied finds it and hands it over
//! again.

use crate::peer::{PeerError, MAX_GROUP};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tickwire_transport::framing::{push_frame, write_frame};

/// A frame's first byte.
pub const FETCH: u8 = 3;
/// A frame's first byte.
pub const FILE: u8 = 4;
/// A frame's first byte.
pub const DATA: u8 = 5;
/// A frame's first byte.
pub const DONE: u8 = 6;
/// The most bytes in one DATA frame.
pub const DATA_CHUNK: usize = 1 << 20;
/// How long one read or write of a transfer may wait.
pub const TRANSFER_STALL: Duration = Duration::from_secs(10);
/// The fastest a snapshot is sent (bytes per second): a transfer leaves
/// the leader's cores and links to the group's own traffic.
pub const TRANSFER_RATE: u64 = 256 << 20;
/// The most files in a snapshot.
pub const MAX_FILES: usize = 65_536;
/// The longest file name.
pub const MAX_NAME: usize = 128;
/// The file that marks a staged snapshot complete.
pub const MANIFEST: &str = "MANIFEST";

/// Why a snapshot could not be described, sent or fetched.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A manifest or a frame that does not parse.
    #[error("snapshot: {0}")]
    Malformed(String),
    /// A file or the connection.
    #[error("snapshot {what}: {source}")]
    Io {
        /// The file, or the peer.
        what: String,
        /// What the OS said.
        source: std::io::Error,
    },
}

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let what = what.to_string();
    move |source| SnapshotError::Io { what, source }
}

/// What a snapshot holds: the index it stands for and the application's
/// files, by name and length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The last log index the files reflect.
    pub index: u64,
    /// The files, by name (plain names, unique) and length.
    pub files: Vec<(String, u64)>,
    /// The members' peer addresses as the leader knows them, so a member
    /// that installs the snapshot reaches members added while it was away
    /// (filled by the leader's store, not the application).
    pub addresses: Vec<(u64, std::net::SocketAddr)>,
}

impl Manifest {
    /// Its encoding: `index u64 | count u32 | (length u64 | name_len u16 |
    /// name)*`, then, if there are addresses, `count u32 | (id u64 |
    /// len u8 | address text)*`; all little-endian.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + self.files.len() * 40);
        b.extend_from_slice(&self.index.to_le_bytes());
        b.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for (name, len) in &self.files {
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
        }
        if !self.addresses.is_empty() {
            b.extend_from_slice(&(self.addresses.len() as u32).to_le_bytes());
            for (id, addr) in &self.addresses {
                let text = addr.to_string();
                b.extend_from_slice(&id.to_le_bytes());
                b.push(text.len() as u8);
                b.extend_from_slice(text.as_bytes());
            }
        }
        b
    }

    /// Parses and checks one (every name plain, unique and short).
    ///
    /// # Errors
    /// [`SnapshotError::Malformed`].
    pub fn parse(b: &[u8]) -> Result<Self, SnapshotError> {
        let bad = |why: &str| SnapshotError::Malformed(format!("manifest: {why}"));
        let at = std::cell::Cell::new(0usize);
        let take = |n: usize| -> Result<&[u8], SnapshotError> {
            let from = at.get();
            if b.len() - from < n {
                return Err(bad("cut short"));
            }
            at.set(from + n);
            Ok(&b[from..from + n])
        };
        let index = u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad("index"))?);
        let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad("count"))?) as usize;
        if count > MAX_FILES {
            return Err(bad("too many files"));
        }
        let mut files: Vec<(String, u64)> = Vec::with_capacity(count);
        // Names checked for repeats in one pass (a hostile manifest of
        // 65,536 names costs no more than a fair one).
        let mut seen = std::collections::HashSet::with_capacity(count);
        for _ in 0..count {
            let len = u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad("length"))?);
            let n = u16::from_le_bytes(take(2)?.try_into().map_err(|_| bad("name length"))?) as usize;
            let name = std::str::from_utf8(take(n)?).map_err(|_| bad("a name is not UTF-8"))?;
            check_name(name).map_err(|why| bad(&format!("{name:?}: {why}")))?;
            if !seen.insert(name) {
                return Err(bad(&format!("{name:?} twice")));
            }
            files.push((name.to_owned(), len));
        }
        let mut addresses = Vec::new();
        if at.get() < b.len() {
            let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad("address count"))?) as usize;
            if count > MAX_FILES {
                return Err(bad("too many addresses"));
            }
            for _ in 0..count {
                let id = u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad("member id"))?);
                let n = take(1)?[0] as usize;
                let addr = std::str::from_utf8(take(n)?)
                    .ok()
                    .and_then(|t| t.parse::<std::net::SocketAddr>().ok())
                    .ok_or_else(|| bad(&format!("member {id}'s address")))?;
                addresses.push((id, addr));
            }
        }
        if at.get() < b.len() {
            return Err(bad("bytes after the last address"));
        }
        Ok(Self { index, files, addresses })
    }

    /// The files' bytes in all.
    pub fn bytes(&self) -> u64 {
        self.files.iter().fold(0u64, |a, f| a.saturating_add(f.1))
    }
}

/// A name a snapshot may hold: plain (no directory), not the marker.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err("1 to 128 bytes");
    }
    if name == "." || name == ".." || name.starts_with(MANIFEST) || name.contains(['/', '\0']) {
        return Err("not a plain file name");
    }
    Ok(())
}

/// Where the snapshot for `index` is staged under `dir`.
pub fn staging(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("in-{index}"))
}

/// The complete snapshot staged under `dir` for `index`, if there is one.
pub fn staged(dir: &Path, index: u64) -> Option<Manifest> {
    let b = std::fs::read(staging(dir, index).join(MANIFEST)).ok()?;
    let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    Manifest::parse(body).ok().filter(|m| m.index == index)
}

/// A FETCH frame's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch<'a> {
    /// The fetching member.
    pub from: u64,
    /// The member asked.
    pub to: u64,
    /// The snapshot's index.
    pub index: u64,
    /// The group.
    pub group: &'a str,
}

impl<'a> Fetch<'a> {
    /// Parses a frame's body as a FETCH.
    ///
    /// # Errors
    /// [`PeerError::Malformed`].
    pub fn parse(frame: &'a [u8]) -> Result<Self, PeerError> {
        if frame.len() < 26 || frame[0] != FETCH {
            return Err(PeerError::Malformed("not a FETCH of at least 26 bytes"));
        }
        let u = |at: usize| u64::from_le_bytes(frame[at..at + 8].try_into().unwrap_or_default());
        let group = std::str::from_utf8(&frame[25..]).map_err(|_| PeerError::Malformed("group is not UTF-8"))?;
        if group.len() > MAX_GROUP {
            return Err(PeerError::Malformed("group longer than 64 bytes"));
        }
        Ok(Self { from: u(1), to: u(9), index: u(17), group })
    }

    /// Appends the frame (length prefix included) to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let [from, to, index] = [self.from, self.to, self.index].map(u64::to_le_bytes);
        push_frame(out, &[&[FETCH], &from, &to, &index, self.group.as_bytes()]);
    }
}

/// Reads one frame into `buf`: its kind and body.
fn read_frame<'b>(r: &mut impl Read, buf: &'b mut Vec<u8>) -> Result<(u8, &'b [u8]), SnapshotError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(io("from the leader"))?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > DATA_CHUNK + 1 + MAX_NAME + 8 {
        return Err(SnapshotError::Malformed(format!("a frame of {len} bytes")));
    }
    buf.resize(len, 0);
    r.read_exact(buf).map_err(io("from the leader"))?;
    Ok((buf[0], &buf[1..]))
}

/// Sends the files of `manifest`, in `dir`, on `stream` (a member's FETCH
/// read already): each as FILE then DATA frames, then DONE. Every file is
/// opened before the first is sent (a newer checkpoint may remove the
/// directory meanwhile; one removed before that fails the transfer, and
/// the member fetches again).
/// `sent` counts the bytes as they go.
///
/// # Errors
/// [`SnapshotError`] naming the file, or the connection.
pub fn serve(mut stream: TcpStream, dir: &Path, manifest: &Manifest, sent: &AtomicU64) -> Result<(), SnapshotError> {
    let mut files = Vec::with_capacity(manifest.files.len());
    for (name, len) in &manifest.files {
        let path = dir.join(name);
        let f = File::open(&path).map_err(io(path.display()))?;
        files.push((name, *len, f));
    }
    // Handed over from the member's poller: blocking from here on.
    stream.set_nonblocking(false).map_err(io("the snapshot link"))?;
    stream.set_write_timeout(Some(TRANSFER_STALL)).map_err(io("the snapshot link"))?;
    stream.set_nodelay(true).map_err(io("the snapshot link"))?;
    let mut out = std::io::BufWriter::with_capacity(DATA_CHUNK + 64, &stream);
    let mut buf = vec![0u8; DATA_CHUNK];
    let (started, mut total) = (std::time::Instant::now(), 0u64);
    for (name, len, mut f) in files {
        write_frame(&mut out, &[&[FILE], &len.to_le_bytes(), name.as_bytes()]).map_err(io("the snapshot link"))?;
        let mut left = len;
        while left > 0 {
            let n = DATA_CHUNK.min(left as usize);
            f.read_exact(&mut buf[..n]).map_err(io(dir.join(name).display()))?;
            write_frame(&mut out, &[&[DATA], &buf[..n]]).map_err(io("the snapshot link"))?;
            left -= n as u64;
            sent.fetch_add(n as u64, Ordering::Relaxed);
            total += n as u64;
            let due = Duration::from_secs_f64(total as f64 / TRANSFER_RATE as f64);
            if let Some(ahead) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }
    write_frame(&mut out, &[&[DONE]]).map_err(io("the snapshot link"))?;
    out.flush().map_err(io("the snapshot link"))?;
    drop(out);
    // Its close, once the fetcher has read everything (bounded: a
    // fetcher's host gone leaves no thread behind).
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(TRANSFER_STALL));
    let _ = stream.read(&mut [0u8; 1]);
    Ok(())
}

/// Who fetches, from whom.
#[derive(Debug, Clone)]
pub struct FetchFrom {
    /// This member and its address (dials leave from it).
    pub me: (u64, SocketAddr),
    /// The leader and its peer address.
    pub leader: (u64, SocketAddr),
    /// The group.
    pub group: String,
    /// Where snapshots are staged (`snapshots/` beside the log).
    pub dir: PathBuf,
}

/// Fetches the files of `manifest` from its leader into
/// `snapshots/in-INDEX/` (an older incomplete copy there is replaced),
/// synced, then writes the `MANIFEST` that marks it complete. `got`
/// counts the bytes as they come.
///
/// # Errors
/// [`SnapshotError`]: the leader refused or went away, a file does not
/// match the manifest, a file could not be written.
pub fn fetch(from: &FetchFrom, manifest: &Manifest, got: &AtomicU64) -> Result<PathBuf, SnapshotError> {
    let into = staging(&from.dir, manifest.index);
    let _ = std::fs::remove_dir_all(&into);
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&into)
        .map_err(io(into.display()))?;
    let link = format!("the link to member {} ({})", from.leader.0, from.leader.1);
    let s = crate::agent::dial_blocking(from.me.1, from.leader.1, TRANSFER_STALL).map_err(io(&link))?;
    s.set_read_timeout(Some(TRANSFER_STALL)).map_err(io(&link))?;
    let mut hello = Vec::new();
    Fetch { from: from.me.0, to: from.leader.0, index: manifest.index, group: &from.group }.emit(&mut hello);
    (&s).write_all(&hello).map_err(io(&link))?;
    let mut r = std::io::BufReader::with_capacity(DATA_CHUNK + 64, &s);
    let mut buf = Vec::with_capacity(DATA_CHUNK + 64);
    for (name, len) in &manifest.files {
        let (kind, body) = read_frame(&mut r, &mut buf)?;
        if kind != FILE || body.len() < 8 || &body[8..] != name.as_bytes() || body[..8] != len.to_le_bytes() {
            return Err(SnapshotError::Malformed(format!("{link}: expected file {name:?} of {len} bytes")));
        }
        let path = into.join(name);
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(io(path.display()))?;
        let mut left = *len;
        while left > 0 {
            let (kind, body) = read_frame(&mut r, &mut buf)?;
            if kind != DATA || body.is_empty() || body.len() as u64 > left {
                return Err(SnapshotError::Malformed(format!("{link}: {name:?} longer than its {len} bytes")));
            }
            f.write_all(body).map_err(io(path.display()))?;
            left -= body.len() as u64;
            got.fetch_add(body.len() as u64, Ordering::Relaxed);
        }
        f.sync_all().map_err(io(path.display()))?;
    }
    match read_frame(&mut r, &mut buf)? {
        (DONE, _) => {}
        _ => return Err(SnapshotError::Malformed(format!("{link}: no DONE after the last file"))),
    }
    let mut m = manifest.emit();
    m.extend_from_slice(&crc32fast::hash(&m).to_le_bytes());
    crate::files::replace(&into, MANIFEST, &m).map_err(io(into.join(MANIFEST).display()))?;
    // And `in-INDEX` in its parent: the log says it is there once stepped.
    File::open(&from.dir).and_then(|d| d.sync_all()).map_err(io(from.dir.display()))?;
    Ok(into)
}

/// Removes the staged snapshots under `dir` up to `index` (this process's
/// own `in-N` directories).
pub fn remove_staged(dir: &Path, index: u64) {
    let Ok(list) = std::fs::read_dir(dir) else { return };
    for e in list.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str().and_then(|n| n.strip_prefix("in-")).and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        if n <= index {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_manifest_round_trips_and_bad_names_are_refused() {
        let mut m = Manifest {
            index: 42,
            files: vec![("a.twj".into(), 10), ("durables.json".into(), 0)],
            ..Manifest::default()
        };
        assert_eq!(Manifest::parse(&m.emit()).unwrap(), m);
        m.addresses = vec![(1, "127.0.0.1:7401".parse().unwrap()), (4, "[::1]:7404".parse().unwrap())];
        assert_eq!(Manifest::parse(&m.emit()).unwrap(), m);
        for bad in ["../x", "MANIFEST", "", "a/b"] {
            let m = Manifest { index: 1, files: vec![(bad.into(), 1)], ..Manifest::default() };
            assert!(Manifest::parse(&m.emit()).is_err(), "{bad:?} taken");
        }
        let twice = Manifest { index: 1, files: vec![("a".into(), 1), ("a".into(), 2)], ..Manifest::default() };
        assert!(Manifest::parse(&twice.emit()).unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn a_fetch_frame_round_trips() {
        let mut out = Vec::new();
        Fetch { from: 2, to: 1, index: 99, group: "ldn" }.emit(&mut out);
        assert_eq!(Fetch::parse(&out[4..]).unwrap(), Fetch { from: 2, to: 1, index: 99, group: "ldn" });
        #[rustfmt::skip]
        let want: &[u8] = &[
            28, 0, 0, 0, FETCH, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0, 0, 0,
            b'l', b'd', b'n',
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn a_served_snapshot_is_file_data_and_done_frames_each_behind_its_length() {
        let dir = std::env::temp_dir().join(format!("tw-ha-snap-bytes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), b"hi").unwrap();
        let m = Manifest { index: 3, files: vec![("f".into(), 2)], ..Manifest::default() };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let (dir2, sent) = (dir.clone(), std::sync::Arc::new(AtomicU64::new(0)));
        let sent2 = std::sync::Arc::clone(&sent);
        let server = std::thread::spawn(move || serve(s, &dir2, &m, &sent2));
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        drop(c);
        server.join().unwrap().unwrap();
        #[rustfmt::skip]
        let want: &[u8] = &[
            10, 0, 0, 0, FILE, 2, 0, 0, 0, 0, 0, 0, 0, b'f',
            3, 0, 0, 0, DATA, b'h', b'i',
            1, 0, 0, 0, DONE,
        ];
        assert_eq!(got, want);
        assert_eq!(sent.load(Ordering::Relaxed), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_go_from_a_server_to_a_fetcher_and_are_staged_complete() {
        let root = std::env::temp_dir().join(format!("tw-ha-snap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let out = root.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        std::fs::write(out.join("big"), &big).unwrap();
        std::fs::write(out.join("small"), b"hello").unwrap();
        let m = Manifest {
            index: 7,
            files: vec![("big".into(), big.len() as u64), ("small".into(), 5)],
            ..Manifest::default()
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (m2, out2) = (m.clone(), out.clone());
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = Vec::new();
            let (kind, n) = read_frame(&mut s, &mut buf).map(|(k, b)| (k, b.len())).unwrap();
            assert_eq!(kind, FETCH);
            let f = Fetch::parse(&buf[..]).unwrap();
            assert_eq!((f.from, f.index, n), (2, 7, 24 + 3));
            serve(s, &out2, &m2, &AtomicU64::new(0)).unwrap();
        });
        let from = FetchFrom {
            me: (2, "127.0.0.1:0".parse().unwrap()),
            leader: (1, addr),
            group: "ldn".into(),
            dir: root.join("snapshots"),
        };
        let got = AtomicU64::new(0);
        let dir = fetch(&from, &m, &got).unwrap();
        server.join().unwrap();
        assert_eq!(std::fs::read(dir.join("big")).unwrap(), big);
        assert_eq!(got.load(Ordering::Relaxed), big.len() as u64 + 5);
        assert_eq!(staged(&root.join("snapshots"), 7), Some(m));
        assert_eq!(staged(&root.join("snapshots"), 8), None);
        remove_staged(&root.join("snapshots"), 7);
        assert!(!dir.exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Manifest::parse(&b);
            let _ = Fetch::parse(&b);
        }
    }
}
