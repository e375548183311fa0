//! A mapped file with bounds-checked atomic and byte access.

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
}

impl MappedFile {
    /// Creates `path` exclusively (fails if it exists), sizes it to `len`
    /// zero bytes and maps it.
    pub fn create_new(path: &Path, len: usize) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(path)?;
        file.set_len(len as u64)?;
        Ok(Self { map: sys::map_file(&file, len)?, path: Some(path.to_owned()) })
    }

    /// Opens and maps an existing file whole. Returns the file length so the
    /// caller can validate the header before trusting it.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "empty file"));
        }
        Ok(Self { map: sys::map_file(&file, len)?, path: Some(path.to_owned()) })
    }

    /// Reads up to `n` bytes from the start of `path` without mapping it.
    pub fn peek(path: &Path, n: usize) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::with_capacity(n);
        File::open(path)?.take(n as u64).read_to_end(&mut buf)?;
        Ok(buf)
    }

    /// A zeroed anonymous block of `len` bytes.
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Ok(Self { map: sys::map_anonymous(len)?, path: None })
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
