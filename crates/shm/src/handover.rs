//! Logs handed over a Unix socket instead of named in a directory.
//!
//! A log that two processes of different users share, or that one of
//! them must not be able to shrink under the other, lives in a sealed
//! `memfd`: [`sealed`] makes one of a given size and seals it so that
//! neither its size nor its seals can change again (`F_SEAL_SHRINK`,
//! `F_SEAL_GROW`, `F_SEAL_SEAL`). Its descriptor crosses a Unix socket
//! beside a message ([`send`], [`recv`]), and the receiver checks the
//! seals ([`check_sealed`]) before mapping it: a file that cannot shrink
//! can never raise SIGBUS in the process that maps it, and a file with no
//! name cannot be opened, replaced or squatted by anyone else.
//!
//! [`crate::LogAppender::create_sealed`] and [`crate::LogReader::open_fd`]
//! build the two ends of a log on these.

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer};
use rustix::net::{SendAncillaryMessage, SendFlags};
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The seals a handed-over log carries: its size is fixed for good.
const SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW).union(SealFlags::SEAL);

/// Descriptors taken from one message at most; more are closed unused.
const MAX_FDS: usize = 4;

/// Makes an anonymous file of `len` bytes, backed by reserved memory (so
/// no later touch of a page can fail for want of space), and seals its
/// size. `name` shows in `/proc/PID/fd` (`memfd:NAME`).
///
/// # Errors
/// What `memfd_create`, the reservation (`ENOSPC` when memory is short)
/// or the seal failed with.
pub fn sealed(name: &str, len: usize) -> io::Result<File> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let file = File::from(fd);
    crate::sys::reserve(&file, len)?;
    rustix::fs::fcntl_add_seals(&file, SEALS)?;
    Ok(file)
}

/// Checks that `file`, received from another process, is a regular file
/// that can never shrink (a memfd sealed with `F_SEAL_SHRINK`): mapping
/// anything else would let its sender raise SIGBUS here.
///
/// # Errors
/// `InvalidInput` saying what it is instead.
pub fn check_sealed(file: &File) -> io::Result<()> {
    crate::mapped::not_regular(&file.metadata()?)?;
    match rustix::fs::fcntl_get_seals(file) {
        Ok(s) if s.contains(SealFlags::SHRINK) => Ok(()),
        Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, "a memfd not sealed against shrinking")),
        Err(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, "a file that cannot be sealed, not a memfd")),
    }
}

/// Checks that the first `len` bytes of `file`, received from another
/// process, are backed by memory its maker reserved (allocated blocks, not
/// a sparse hole): mapping a sparse file with its pages populated would
/// allocate them in the receiver, at the sender's say.
///
/// # Errors
/// `InvalidInput` naming the bytes reserved and needed.
pub fn check_reserved(file: &File, len: usize) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let reserved = file.metadata()?.blocks().saturating_mul(512);
    if reserved < len as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{reserved} bytes reserved of the {len} its layout needs (a sparse file, not a log made by tickwire)"
            ),
        ));
    }
    Ok(())
}

/// Sends `data` on a Unix stream socket, with `fd` beside its first byte
/// when given. Returns the bytes sent (a short send on a full socket
/// carries the descriptor all the same).
///
/// # Errors
/// As `sendmsg`; `WouldBlock` on a full non-blocking socket.
pub fn send(sock: impl AsFd, data: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<usize> {
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for a descriptor in the control buffer"));
    }
    Ok(rustix::net::sendmsg(sock, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL)?)
}

/// Receives into `buf` from a Unix stream socket; the descriptors that
/// came beside those bytes are pushed on `fds` (close-on-exec; beyond
/// `MAX_FDS` in one message the kernel closes the rest and this is an
/// error). Returns the bytes received, 0 at end of stream.
///
/// # Errors
/// As `recvmsg`; `WouldBlock` on an empty non-blocking socket;
/// `InvalidData` when descriptors were cut off.
pub fn recv(sock: impl AsFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    if got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("more than {MAX_FDS} descriptors at once")));
    }
    Ok(got.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_sealed_file_keeps_its_size_and_crosses_a_socket() {
        let f = sealed("tw-test", 8192).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 8192);
        assert!(f.set_len(4096).is_err(), "shrinking a sealed file must fail");
        assert!(f.set_len(16384).is_err(), "growing a sealed file must fail");
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(send(&a, b"log", Some(f.as_fd())).unwrap(), 3);
        let (mut buf, mut fds) = ([0u8; 8], Vec::new());
        assert_eq!(recv(&b, &mut buf, &mut fds).unwrap(), 3);
        assert_eq!(fds.len(), 1);
        let got = File::from(fds.pop().unwrap());
        check_sealed(&got).unwrap();
        assert_eq!(got.metadata().unwrap().len(), 8192);
    }

    #[test]
    fn a_sparse_memfd_is_not_reserved_and_a_sealed_one_is() {
        let f = sealed("tw-reserved", 1 << 16).unwrap();
        check_reserved(&f, 1 << 16).unwrap();
        let sparse = File::from(rustix::fs::memfd_create("tw-sparse", MemfdFlags::CLOEXEC).unwrap());
        sparse.set_len(1 << 30).unwrap();
        let e = check_reserved(&sparse, 1 << 30).unwrap_err();
        assert!(e.to_string().contains("sparse"), "{e}");
    }

    #[test]
    fn an_unsealed_memfd_or_a_plain_file_is_refused() {
        // A memfd made without ALLOW_SEALING (sealed only against sealing).
        let plain = File::from(rustix::fs::memfd_create("tw-plain", MemfdFlags::CLOEXEC).unwrap());
        plain.set_len(4096).unwrap();
        let e = check_sealed(&plain).unwrap_err();
        assert!(e.to_string().contains("not sealed"), "{e}");
        let open = File::from(rustix::fs::memfd_create("tw-open", MemfdFlags::ALLOW_SEALING).unwrap());
        open.set_len(4096).unwrap();
        let e = check_sealed(&open).unwrap_err();
        assert!(e.to_string().contains("not sealed"), "{e}");
        // A named file (on tmpfs: sealed only against sealing; elsewhere no seals).
        let path = std::env::temp_dir().join(format!("tw-handover-{}", std::process::id()));
        let file = File::options().read(true).write(true).create_new(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        file.set_len(4096).unwrap();
        let e = check_sealed(&file).unwrap_err();
        assert!(e.to_string().contains("seal"), "{e}");
        let dir = File::open("/").unwrap();
        assert!(check_sealed(&dir).is_err());
    }
}
