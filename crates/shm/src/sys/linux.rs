//! Linux backend: mmap, futex, /proc and clock_gettime.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// A shared read-write mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    /// Slot in the SIGBUS registry (file mappings only).
    guard: Option<usize>,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it goes
// through atomics or through regions whose ownership the log protocol assigns
// to exactly one writer (see `log`), so moving or sharing the handle between
// threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` exposes no interior state besides the memory.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Whether its file was truncated or replaced under it and, made
    /// inside [`super::sigbus::untrusted`], it now holds zero pages.
    pub fn is_broken(&self) -> bool {
        self.guard.is_some_and(super::sigbus::is_broken)
    }

    /// Base address (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(i) = self.guard {
            super::sigbus::unregister(i);
        }
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Maps `len` bytes of `file` shared and read-write, with the page tables
/// populated up front (`MAP_POPULATE`), so that the first lap of a log does
/// not take page faults on the hot path.
///
/// The caller must have checked that the file is at least `len` bytes long:
/// touching a mapped page beyond the end of the file raises SIGBUS. If the
/// file shrinks later (another process truncates it), the SIGBUS handler
/// names `path` and exits, or, for a mapping made inside
/// [`super::sigbus::untrusted`], replaces it with zero pages
/// ([`super::sigbus`]).
pub fn map_file(file: &File, len: usize, path: &std::path::Path) -> io::Result<Mapping> {
    // SAFETY: a fresh mapping at an address of the kernel's choosing; the fd
    // is valid for the call and the mapping outlives it independently.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?;
    Ok(Mapping { ptr, len, guard: super::sigbus::register(p as usize, len, path) })
}

/// Gives `file` `len` bytes backed by real space on its filesystem (and that
/// length), so that no later touch of a mapped page can fail for want of
/// space. `ENOSPC` when the filesystem is full.
pub fn reserve(file: &File, len: usize) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: a plain system call on a valid descriptor; no memory is passed.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Maps `len` zeroed bytes shared with nobody (a private counters block).
pub fn map_anonymous(len: usize) -> io::Result<Mapping> {
    // SAFETY: anonymous mapping, no fd involved.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping { ptr: NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?, len, guard: None })
}

/// Sleeps while `*word == expected`, at most `timeout`. Returns on a wake,
/// a timeout, a signal, or at once if the word differs. Works across
/// processes on shared file mappings (non-private futex).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call;
    // FUTEX_WAIT only reads it and the timespec outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every waiter sleeping on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it does not write.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// Registers this process for `membarrier(GLOBAL_EXPEDITED)`: from now on,
/// another process calling [`membarrier_global`] forces a full memory
/// barrier on every running thread of this one. Returns false if the kernel
/// does not offer it.
pub fn membarrier_register() -> bool {
    // SAFETY: membarrier takes no pointers; registration has no memory effects.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 }
}

/// Forces a full memory barrier on every running thread of every registered
/// process (the heavy side of an asymmetric Dekker fence). About 1 us.
pub fn membarrier_global() -> bool {
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0 }
}

/// The name of the user `uid` from the system's user database (NSS, so
/// LDAP users too), if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero `passwd` is a valid value of a plain C struct.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `pw` and `out` are ours,
    // `buf` is writable for `buf.len()` bytes; the strings `pw` points to
    // live in `buf`, read below while it lives.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: `pw_name` is a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    name.to_str().ok().filter(|n| !n.is_empty()).map(str::to_owned)
}

/// The id of the group `name` from the system's group database, if it exists.
pub fn group_id(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: an all-zero `group` is a valid value of a plain C struct.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: `cname` is NUL-terminated; `gr`, `out` are ours and `buf` is
    // writable for `buf.len()` bytes; only the gid (a copy) is kept.
    let rc = unsafe { libc::getgrnam_r(cname.as_ptr(), &mut gr, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    (rc == 0 && !out.is_null()).then_some(gr.gr_gid)
}

/// Ignores SIGINT in this process (`SIG_IGN`, not a handler, so blocking
/// system calls are not interrupted). For worker processes whose parent
/// decides when they stop.
pub fn ignore_sigint() {
    // SAFETY: installing SIG_IGN has no handler code to run and touches no
    // memory of ours.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
}

/// Restores the default SIGPIPE action (terminate quietly), as command-line
/// tools expect: `tickwire stat | head` must end, not panic. The Rust
/// runtime ignores SIGPIPE, which turns a closed stdout into a panic in
/// `println!`.
pub fn default_sigpipe() {
    // SAFETY: installing SIG_DFL has no handler code and touches no memory of ours.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Asks the C allocator to return the free memory it holds to the OS
/// (glibc's `malloc_trim(0)`: the top of each arena, and whole free pages
/// inside them): after a large free, so that memory given back by a
/// long-running process shows in its resident set. A no-op elsewhere.
/// Takes time in proportion to the heap (about a millisecond for 100 MiB):
/// call it off the per-message path.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes the allocator's own locks and only gives
    // back pages no allocation uses; it reads or writes no memory of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Nanoseconds on CLOCK_MONOTONIC: comparable between processes of one boot.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A process, named by pid and start time so that a reused pid is not
/// mistaken for the process that wrote a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The pid.
    pub pid: u32,
    /// Start time in clock ticks after boot (field 22 of /proc/PID/stat).
    pub start_time: u64,
}

impl ProcessId {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        Self { pid, start_time: start_time(pid).unwrap_or(0) }
    }

    /// The running (not zombie) process `pid`, with its start time; `None`
    /// if there is none.
    pub fn of(pid: u32) -> Option<Self> {
        match read_stat(pid) {
            Some((state, start_time)) if state != 'Z' && pid != 0 => Some(Self { pid, start_time }),
            _ => None,
        }
    }

    /// Whether this exact process still runs (a pid reused by another process
    /// counts as dead). Zombies count as dead.
    pub fn is_alive(&self) -> bool {
        if self.pid == 0 {
            return false;
        }
        match read_stat(self.pid) {
            Some((state, st)) => state != 'Z' && (self.start_time == 0 || st == self.start_time),
            None => false,
        }
    }
}

fn read_stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: split after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    // After the state, start time is the 19th field (field 22 overall).
    let st = it.nth(18)?.parse().ok()?;
    Some((state, st))
}

fn start_time(pid: u32) -> Option<u64> {
    read_stat(pid).map(|(_, st)| st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_a_reused_pid_is_not() {
        let me = ProcessId::current();
        assert!(me.start_time > 0);
        assert!(me.is_alive());
        assert!(!ProcessId { pid: me.pid, start_time: me.start_time + 1 }.is_alive());
        assert!(!ProcessId { pid: 0, start_time: 0 }.is_alive());
    }

    #[test]
    fn futex_wait_returns_when_word_differs_or_times_out() {
        let w = AtomicU32::new(5);
        futex_wait(&w, 4, Duration::from_secs(10)); // differs: immediate
        let t = std::time::Instant::now();
        futex_wait(&w, 5, Duration::from_millis(5));
        assert!(t.elapsed() >= Duration::from_millis(4));
    }
}
