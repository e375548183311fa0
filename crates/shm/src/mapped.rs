//! A mapped file with bounds-checked atomic and byte access.

use crate::dir::Dir;
use crate::error::ShmError;
use crate::sys::{self, Mapping};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A shared mapping of a whole file (or an anonymous block), with safe
/// accessors for atomics at fixed offsets.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: Mapping,
    path: Option<PathBuf>,
    /// (device, inode) of a file this process created: what it may remove.
    created: Option<(u64, u64)>,
}

impl MappedFile {
    /// Creates a temporary file in `dir` (an unpredictable name from
    /// `stem`, `O_EXCL`, the directory's file mode), reserves `len` zero
    /// bytes for it on its filesystem and maps it; returns it and the
    /// temporary name. `known_as` is the name the file will have once the
    /// caller has filled it in and moved it into place: errors and the
    /// SIGBUS handler name it, and [`MappedFile::remove_created`] removes it.
    ///
    /// The space is reserved up front (`posix_fallocate`): on a full tmpfs
    /// the first touch of an unreserved page raises SIGBUS, so a full
    /// filesystem must be an error here instead. On failure the file is
    /// removed again.
    ///
    /// # Errors
    /// [`ShmError::NoSpace`] when the filesystem cannot hold `len` bytes,
    /// [`ShmError::Io`] otherwise.
    pub fn create_new(dir: &Dir, stem: &str, len: usize, known_as: &Path) -> Result<(Self, String), ShmError> {
        let (file, tmp) = dir.create_temp(stem).map_err(|e| ShmError::io(&dir.path().join(stem), e))?;
        let made = sys::reserve(&file, len).and_then(|()| Ok((file.metadata()?, sys::map_file(&file, len, known_as)?)));
        match made {
            Ok((meta, map)) => {
                use std::os::unix::fs::MetadataExt;
                Ok((Self { map, path: Some(known_as.to_owned()), created: Some((meta.dev(), meta.ino())) }, tmp))
            }
            Err(e) => {
                let _ = dir.remove(&tmp);
                Err(if e.raw_os_error() == Some(libc::ENOSPC) {
                    ShmError::NoSpace {
                        dir: dir.path().to_owned(),
                        file: known_as.file_name().map(Into::into).unwrap_or_default(),
                        needs: len as u64,
                    }
                } else {
                    ShmError::io(&dir.path().join(&tmp), e)
                })
            }
        }
    }

    /// Makes a sealed anonymous file of `len` bytes ([`crate::handover::sealed`],
    /// named after `label`, `memfd:NAME`) and maps it; returns
    /// it and the file, to hand over. `label` names it in errors.
    pub fn create_sealed(len: usize, label: &Path) -> io::Result<(Self, File)> {
        let name = label.to_string_lossy();
        let file = crate::handover::sealed(name.strip_prefix("memfd:").unwrap_or(&name), len)?;
        let map = sys::map_file(&file, len, label)?;
        Ok((Self { map, path: Some(label.to_owned()), created: None }, file))
    }

    /// Maps the first `len` bytes of an open file, which the caller has
    /// checked is at least that long; `path` names it in errors and the
    /// SIGBUS handler.
    pub fn from_file(file: &File, len: usize, path: &Path) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "empty file"));
        }
        Ok(Self { map: sys::map_file(file, len, path)?, path: Some(path.to_owned()), created: None })
    }

    /// Opens and maps an existing regular file whole. The caller validates
    /// the header before trusting it.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = open_regular(path, true)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "empty file"));
        }
        Ok(Self { map: sys::map_file(&file, len, path)?, path: Some(path.to_owned()), created: None })
    }

    /// Reads up to `n` bytes from the start of the regular file `path`
    /// without mapping it.
    pub fn peek(path: &Path, n: usize) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::with_capacity(n);
        open_regular(path, false)?.take(n as u64).read_to_end(&mut buf)?;
        Ok(buf)
    }

    /// A zeroed anonymous block of `len` bytes.
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Ok(Self { map: sys::map_anonymous(len)?, path: None, created: None })
    }

    /// Removes the file this process created, if the name still leads to it.
    /// A file another process put in its place (it took over a name it found
    /// stale) is left alone. Returns whether the file was removed.
    pub fn remove_created(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let (Some(path), Some(id)) = (&self.path, self.created) else { return false };
        match std::fs::symlink_metadata(path) {
            Ok(m) if (m.dev(), m.ino()) == id => std::fs::remove_file(path).is_ok(),
            _ => false,
        }
    }

    /// Whether its file was truncated or replaced under it and the mapping,
    /// made inside [`crate::os::untrusted`], now holds zero pages.
    pub fn is_broken(&self) -> bool {
        self.map.is_broken()
    }

    /// Mapped length.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// The file's path (None for anonymous blocks).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// Base address.
    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// The `AtomicU64` at byte `offset`.
    ///
    /// # Panics
    /// If `offset` is misaligned or out of bounds: offsets are layout
    /// constants, so this is a programming error, not bad input.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len(), "bad atomic offset {offset}");
        // SAFETY: in bounds and 8-aligned (the base is page-aligned); the
        // memory lives as long as `self`, and AtomicU64 has the layout of u64.
        unsafe { &*self.base().add(offset).cast::<AtomicU64>() }
    }

    /// The `AtomicU32` at byte `offset`.
    ///
    /// # Panics
    /// As [`MappedFile::atomic_u64`].
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.len(), "bad atomic offset {offset}");
        // SAFETY: in bounds and 4-aligned; see `atomic_u64`.
        unsafe { &*self.base().add(offset).cast::<AtomicU32>() }
    }

    /// Copies bytes out of the mapping (for headers read once, not hot paths).
    ///
    /// # Safety
    /// No process may write `[offset, offset + out.len())` while it is
    /// copied (the bytes are immutable after creation, or this process is
    /// their only writer); otherwise the copy is a data race. Bounds are
    /// checked here (a violation panics).
    pub unsafe fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.len());
        // SAFETY: bounds checked above; the caller guarantees no concurrent writer.
        unsafe { std::ptr::copy_nonoverlapping(self.base().add(offset), out.as_mut_ptr(), out.len()) }
    }

    /// Copies bytes into the mapping.
    ///
    /// # Safety
    /// This process must be the only writer of `[offset, offset + data.len())`
    /// and no other process may read it until the write is published by a
    /// release store (file creation before the rename, a counter set before
    /// its state word). Bounds are checked here (a violation panics).
    pub unsafe fn write_bytes(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len());
        // SAFETY: bounds checked; the caller guarantees exclusive access.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(offset), data.len()) }
    }
}

/// Opens `path` only if it is a regular file belonging to its directory's
/// owner, never following a symbolic link and never blocking: a FIFO,
/// socket or device named like a tickwire file would otherwise hang the
/// open or the read, and another user's file (in a shared directory) could
/// be a forgery. Checked before opening (so a device is never opened) and
/// again on the open descriptor (so a file swapped in between is caught).
pub(crate) fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    use std::os::unix::fs::MetadataExt;
    not_regular(&std::fs::symlink_metadata(path)?)?;
    let flags = libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let file = OpenOptions::new().read(true).write(write).custom_flags(flags).open(path)?;
    let meta = file.metadata()?;
    not_regular(&meta)?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    crate::dir::owned_by(&meta, std::fs::metadata(parent)?.uid())?;
    Ok(file)
}

pub(crate) fn not_regular(meta: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{what}, not a tickwire file (left alone)")))
}
