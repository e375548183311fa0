//! The XDP program on one interface, shared by every tickwire process there.
//!
//! # Sharing and clean-up
//! * The first process loads the program (libbpf) and attaches it through a
//!   **bpf_link**; each later process finds the attached program
//!   (`bpf_xdp_query`), checks it is tickwire's, opens its maps by id and
//!   takes its own fd on the same link (`bpf_link_get_fd_by_id`).
//! * The kernel counts those fds: the program stays while any tickwire
//!   process on the interface holds one and is detached, with its maps, when
//!   the last one exits, by any means, SIGKILL included. No files in bpffs,
//!   so nothing is left behind and nothing depends on mount namespaces
//!   (`ip netns exec` gives each process its own).
//! * Each process adds its flows to `tw_flows` with its pid and removes them
//!   on drop. A flow left by a process that was killed is **stale**: the next
//!   start finds its pid gone and removes it. A tickwire program attached
//!   without a link (by an old version or by hand: it outlives its process)
//!   that holds no live flow is stale too: the next start replaces it.
//! * Another XDP program on the interface is never touched: set-up fails,
//!   naming it.
//! * Starts and stops on one interface are serialised by an `flock` on
//!   `/run/tickwire/xdp-<netns>-<ifindex>.lock` (released by the kernel if
//!   its holder dies; the file itself is left for the next process).
//!
//! All of this module's `unsafe` is libbpf FFI, each with a `// SAFETY:`.

use crate::XdpError;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Once;

/// The program object, built by build.rs.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tickwire_xdp.o"));
const PROG_NAME: &str = "tickwire_xdp";
/// Per-CPU counters in `tw_stats`.
pub(crate) const STAT_PASSED: u32 = 1;
pub(crate) const STAT_OTHER_QUEUE: u32 = 2;

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Native if the driver has it, generic otherwise.
    #[default]
    Auto,
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the kernel's generic path (`XDP_FLAGS_SKB_MODE`), any driver.
    Generic,
}

impl std::str::FromStr for XdpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "generic" => Ok(Self::Generic),
            _ => Err(format!("{s:?} is not auto, native or generic")),
        }
    }
}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Generic => "generic",
        })
    }
}

/// Map key of a flow: destination address and port, network order.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FlowKey {
    pub addr: u32,
    pub port: u16,
    pub pad: u16,
}

impl FlowKey {
    /// The key of datagrams to `to`.
    pub fn of(to: std::net::SocketAddrV4) -> Self {
        Self { addr: u32::from_ne_bytes(to.ip().octets()), port: to.port().to_be(), pad: 0 }
    }
}

/// Map value of a flow: the queue its socket is bound to and its owner.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flow {
    pub queue: u32,
    pub pid: u32,
}

/// The `tw_kernel` counter, mapped read-only (`BPF_F_MMAPABLE`).
#[derive(Debug)]
struct Mapped {
    ptr: std::ptr::NonNull<std::sync::atomic::AtomicU64>,
    len: usize,
}

// SAFETY: the mapping is a read-only view of one kernel-updated u64, read
// atomically; it may be read from any thread.
unsafe impl Send for Mapped {}

impl Mapped {
    fn new(fd: &OwnedFd) -> Result<Self, XdpError> {
        // SAFETY: sysconf has no preconditions.
        let len = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        // SAFETY: maps the first page of an mmapable array map, read-only,
        // shared; the kernel keeps it valid until munmap.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(XdpError::Bpf { step: "mmap (tw_kernel)", source: std::io::Error::last_os_error() });
        }
        let ptr = std::ptr::NonNull::new(p.cast()).ok_or_else(|| XdpError::Setup("mmap returned null".into()))?;
        Ok(Self { ptr, len })
    }

    fn get(&self) -> u64 {
        // SAFETY: `ptr` is the page mapped in `new`, aligned, alive until drop;
        // the program updates it atomically.
        unsafe { self.ptr.as_ref() }.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `new`, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// How this process came to use the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attach {
    /// Loaded and attached it.
    Loaded,
    /// Joined the program other tickwire processes attached.
    Shared,
    /// Replaced a stale tickwire program (attached without a link, no live
    /// flow): its id.
    ReplacedStale(u32),
}

/// The program on one interface, as this process holds it.
#[derive(Debug)]
pub(crate) struct Program {
    pub mode: XdpMode,
    pub attach: Attach,
    /// Stale flows (of dead processes) removed at start.
    pub stale_flows: u32,
    flows: OwnedFd,
    xsks: OwnedFd,
    stats: OwnedFd,
    kernel: Mapped,
    _prog: OwnedFd,
    _link: Option<OwnedFd>,
    mine: Vec<FlowKey>,
    _lock: OwnedFd,
}

fn os(step: &'static str, ret: i32) -> Result<i32, XdpError> {
    if ret < 0 {
        let errno = if ret == -1 { std::io::Error::last_os_error() } else { std::io::Error::from_raw_os_error(-ret) };
        Err(XdpError::Bpf { step, source: errno })
    } else {
        Ok(ret)
    }
}

fn owned(step: &'static str, fd: i32) -> Result<OwnedFd, XdpError> {
    let fd = os(step, fd)?;
    // SAFETY: libbpf returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn quiet_libbpf() {
    static ONCE: Once = Once::new();
    // SAFETY: clearing libbpf's print callback (None: print nothing); its
    // errors come back as return codes, which are reported.
    ONCE.call_once(|| unsafe {
        libbpf_sys::libbpf_set_print(None);
    });
}

fn name_of(raw: &[std::os::raw::c_char; 16]) -> String {
    let bytes: Vec<u8> = raw.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // kill(pid, 0): ESRCH means gone; EPERM means alive under another user.
    !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

/// The flock that serialises set-up and tear-down on one interface.
fn lock(ifindex: u32) -> Result<OwnedFd, XdpError> {
    let netns = std::fs::metadata("/proc/self/ns/net").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0);
    let dir = ["/run/tickwire", "/tmp"].into_iter().find(|d| std::fs::create_dir_all(d).is_ok()).unwrap_or("/tmp");
    let path = format!("{dir}/xdp-{netns}-{ifindex}.lock");
    // Another user's process may have made the file: flock works on a
    // descriptor opened for reading too.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .or_else(|_| std::fs::File::open(&path))
        .map_err(|e| XdpError::Setup(format!("lock file {path}: {e}")))?;
    let fd = OwnedFd::from(file);
    // SAFETY: flock on a descriptor we own.
    os("flock", unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) })?;
    Ok(fd)
}

struct Found {
    prog: OwnedFd,
    prog_id: u32,
    maps: [Option<OwnedFd>; 4],
}

/// The maps of an attached program, if it is tickwire's.
fn inspect(prog_id: u32) -> Result<Found, XdpError> {
    // SAFETY: plain syscall wrapper; the fd it returns is ours.
    let prog = owned("bpf_prog_get_fd_by_id", unsafe { libbpf_sys::bpf_prog_get_fd_by_id(prog_id) })?;
    let mut ids = [0u32; 8];
    let mut info = libbpf_sys::bpf_prog_info {
        nr_map_ids: ids.len() as u32,
        map_ids: ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a bpf_prog_info of `len` bytes; `map_ids` points at
    // `ids`, which holds `nr_map_ids` entries and outlives the call.
    os("bpf_prog_get_info_by_fd", unsafe {
        libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len)
    })?;
    let name = name_of(&info.name);
    if name != PROG_NAME {
        return Err(XdpError::Foreign { id: prog_id, name });
    }
    let mut maps: [Option<OwnedFd>; 4] = [None, None, None, None];
    for &id in ids.iter().take((info.nr_map_ids as usize).min(ids.len())) {
        // SAFETY: as above.
        let Ok(fd) = owned("bpf_map_get_fd_by_id", unsafe { libbpf_sys::bpf_map_get_fd_by_id(id) }) else { continue };
        let mut minfo = libbpf_sys::bpf_map_info::default();
        let mut mlen = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
        // SAFETY: `minfo` is a bpf_map_info of `mlen` bytes.
        if unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut minfo, &mut mlen) } != 0 {
            continue;
        }
        match name_of(&minfo.name).as_str() {
            // Only a map of this version's layout is read with it: another
            // version's keys could be larger than the buffers here.
            "tw_flows"
                if minfo.key_size as usize == std::mem::size_of::<FlowKey>()
                    && minfo.value_size as usize == std::mem::size_of::<Flow>() =>
            {
                maps[0] = Some(fd)
            }
            "tw_xsks" => maps[1] = Some(fd),
            "tw_stats" => maps[2] = Some(fd),
            "tw_kernel" => maps[3] = Some(fd),
            _ => {}
        }
    }
    Ok(Found { prog, prog_id, maps })
}

/// The XDP link attached to `ifindex`, if any: our own fd on it.
fn find_link(ifindex: u32) -> Option<OwnedFd> {
    let mut id = 0u32;
    loop {
        let mut next = 0u32;
        // SAFETY: plain syscall wrapper writing one u32.
        if unsafe { libbpf_sys::bpf_link_get_next_id(id, &mut next) } != 0 {
            return None;
        }
        id = next;
        // SAFETY: as above; the fd is ours.
        let Ok(fd) = owned("bpf_link_get_fd_by_id", unsafe { libbpf_sys::bpf_link_get_fd_by_id(id) }) else { continue };
        // SAFETY: bpf_link_info is plain old data; zero is a valid value.
        let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
        // SAFETY: `info` is a bpf_link_info of `len` bytes.
        if unsafe { libbpf_sys::bpf_link_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) } != 0 {
            continue;
        }
        // SAFETY: the xdp member of the union is the one the kernel fills
        // for links of type XDP, checked first.
        if info.type_ == libbpf_sys::BPF_LINK_TYPE_XDP && unsafe { info.__bindgen_anon_1.xdp.ifindex } == ifindex {
            return Some(fd);
        }
    }
}

fn map_entries(fd: RawFd) -> Vec<(FlowKey, Flow)> {
    let mut out = Vec::new();
    let mut key = FlowKey::default();
    let mut first = true;
    loop {
        let mut next = FlowKey::default();
        let prev: *const FlowKey = if first { std::ptr::null() } else { &key };
        // SAFETY: keys are FlowKey-sized, as the map was created with.
        if unsafe { libbpf_sys::bpf_map_get_next_key(fd, prev.cast(), (&mut next as *mut FlowKey).cast()) } != 0 {
            return out;
        }
        first = false;
        key = next;
        let mut v = Flow::default();
        // SAFETY: values are Flow-sized.
        if unsafe { libbpf_sys::bpf_map_lookup_elem(fd, (&key as *const FlowKey).cast(), (&mut v as *mut Flow).cast()) }
            == 0
        {
            out.push((key, v));
        }
    }
}

/// Deletes flow `key` if this process owns it.
fn remove_if_mine(flows: RawFd, key: &FlowKey) {
    let mut have = Flow::default();
    // SAFETY: key and value of the map's sizes.
    let ours = unsafe {
        libbpf_sys::bpf_map_lookup_elem(flows, (key as *const FlowKey).cast(), (&mut have as *mut Flow).cast())
    } == 0
        && have.pid == std::process::id();
    if ours {
        // SAFETY: key of the map's key size.
        unsafe { libbpf_sys::bpf_map_delete_elem(flows, (key as *const FlowKey).cast()) };
    }
}

/// The owner of a flow handed back to the kernel ([`Program::share_flow`]).
const SHARED_PID: u32 = 0;

/// Removes flows whose owner is gone, and shared flows when no live flow
/// is left; returns how many, and how many live flows remain.
fn prune(flows: RawFd) -> (u32, usize) {
    let mut pruned = 0;
    let mut live = 0;
    let mut shared = Vec::new();
    for (k, v) in map_entries(flows) {
        if v.pid == SHARED_PID {
            shared.push(k);
        } else if pid_alive(v.pid) {
            live += 1;
        } else {
            // SAFETY: key of the map's key size.
            unsafe { libbpf_sys::bpf_map_delete_elem(flows, (&k as *const FlowKey).cast()) };
            pruned += 1;
        }
    }
    if live == 0 {
        for k in shared {
            // SAFETY: key of the map's key size.
            unsafe { libbpf_sys::bpf_map_delete_elem(flows, (&k as *const FlowKey).cast()) };
            pruned += 1;
        }
    }
    (pruned, live)
}

/// Whether any XDP program is attached to the interface.
pub(crate) fn attached(ifindex: u32) -> bool {
    query(ifindex).is_ok_and(|q| q.prog_id != 0)
}

fn query(ifindex: u32) -> Result<libbpf_sys::bpf_xdp_query_opts, XdpError> {
    let mut q = libbpf_sys::bpf_xdp_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `q` is a sized bpf_xdp_query_opts.
    os("bpf_xdp_query", unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut q) })?;
    Ok(q)
}

fn mode_of(attach_mode: u8) -> XdpMode {
    if u32::from(attach_mode) == libbpf_sys::XDP_ATTACHED_SKB {
        XdpMode::Generic
    } else {
        XdpMode::Native
    }
}

/// Loads the object; returns the program and map fds (the object closed).
fn load() -> Result<(OwnedFd, [OwnedFd; 4]), XdpError> {
    quiet_libbpf();
    // SAFETY: OBJECT is a static ELF image; libbpf copies what it needs.
    let obj = unsafe { libbpf_sys::bpf_object__open_mem(OBJECT.as_ptr().cast(), OBJECT.len() as _, std::ptr::null()) };
    if obj.is_null() {
        return Err(XdpError::Bpf { step: "bpf_object__open_mem", source: std::io::Error::last_os_error() });
    }
    struct Close(*mut libbpf_sys::bpf_object);
    impl Drop for Close {
        fn drop(&mut self) {
            // SAFETY: the object was opened above and is closed once.
            unsafe { libbpf_sys::bpf_object__close(self.0) };
        }
    }
    let obj = Close(obj);
    // SAFETY: a valid, opened object.
    os("bpf_object__load (BPF verifier; needs CAP_BPF and CAP_NET_ADMIN)", unsafe {
        libbpf_sys::bpf_object__load(obj.0)
    })?;
    let dup = |step: &'static str, fd: i32| -> Result<OwnedFd, XdpError> {
        os(step, fd)?;
        // SAFETY: `fd` belongs to the object; the duplicate is ours.
        owned(step, unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })
    };
    let name = |s: &CStr| s.as_ptr();
    // SAFETY: valid object and NUL-terminated names.
    let prog = unsafe { libbpf_sys::bpf_object__find_program_by_name(obj.0, name(c"tickwire_xdp")) };
    if prog.is_null() {
        return Err(XdpError::Setup("the XDP object has no program tickwire_xdp".into()));
    }
    // SAFETY: `prog` belongs to the loaded object.
    let prog = dup("bpf_program__fd", unsafe { libbpf_sys::bpf_program__fd(prog) })?;
    let map = |n: &CStr| {
        // SAFETY: valid object and NUL-terminated name.
        dup("bpf_object__find_map_fd_by_name", unsafe { libbpf_sys::bpf_object__find_map_fd_by_name(obj.0, name(n)) })
    };
    Ok((prog, [map(c"tw_flows")?, map(c"tw_xsks")?, map(c"tw_stats")?, map(c"tw_kernel")?]))
}

fn link_create(prog: &OwnedFd, ifindex: u32, mode: XdpMode) -> Result<OwnedFd, XdpError> {
    let flags = match mode {
        XdpMode::Generic => libbpf_sys::XDP_FLAGS_SKB_MODE,
        _ => libbpf_sys::XDP_FLAGS_DRV_MODE,
    };
    let opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        flags,
        ..Default::default()
    };
    // SAFETY: a loaded XDP program, an interface index and sized options.
    owned("bpf_link_create (attach XDP)", unsafe {
        libbpf_sys::bpf_link_create(prog.as_raw_fd(), ifindex as i32, libbpf_sys::BPF_XDP, &opts)
    })
}

impl Program {
    /// Loads and attaches the program, or joins the one attached.
    pub fn open(ifindex: u32, mode: XdpMode) -> Result<Self, XdpError> {
        quiet_libbpf();
        let lock = lock(ifindex)?;
        let q = query(ifindex)?;
        let mut replaced = None;
        if q.prog_id != 0 {
            let found = inspect(q.prog_id)?;
            let attached = mode_of(q.attach_mode);
            let link = find_link(ifindex);
            let [flows, xsks, stats, kernel] = found.maps;
            let (stale_flows, live) = flows.as_ref().map_or((0, 0), |f| prune(f.as_raw_fd()));
            if let (Some(flows), Some(xsks), Some(stats), Some(kernel)) = (flows, xsks, stats, kernel) {
                if link.is_some() || live > 0 {
                    if mode != XdpMode::Auto && mode != attached {
                        return Err(XdpError::Setup(format!(
                            "tickwire's XDP program is attached in {attached} mode here; asked for {mode}"
                        )));
                    }
                    return Ok(Self {
                        mode: attached,
                        attach: Attach::Shared,
                        stale_flows,
                        flows,
                        xsks,
                        stats,
                        kernel: Mapped::new(&kernel)?,
                        _prog: found.prog,
                        _link: link,
                        mine: Vec::new(),
                        _lock: lock,
                    });
                }
            }
            // Ours but without the maps this version uses (another
            // version), or held by no link and no live process (stale).
            if link.is_some() || live > 0 {
                return Err(XdpError::Setup(format!(
                    "another version of tickwire's XDP program (id {}) is in use on this interface",
                    found.prog_id
                )));
            }
            let flags = if attached == XdpMode::Generic {
                libbpf_sys::XDP_FLAGS_SKB_MODE
            } else {
                libbpf_sys::XDP_FLAGS_DRV_MODE
            };
            // SAFETY: detaches whatever is attached in that mode.
            os("bpf_xdp_detach (stale program)", unsafe {
                libbpf_sys::bpf_xdp_detach(ifindex as i32, flags, std::ptr::null())
            })?;
            replaced = Some(found.prog_id);
        }
        let (prog, [flows, xsks, stats, kernel]) = load()?;
        let (link, mode) = match mode {
            XdpMode::Auto => match link_create(&prog, ifindex, XdpMode::Native) {
                Ok(l) => (l, XdpMode::Native),
                Err(_) => (link_create(&prog, ifindex, XdpMode::Generic)?, XdpMode::Generic),
            },
            m => (link_create(&prog, ifindex, m)?, m),
        };
        Ok(Self {
            mode,
            attach: replaced.map_or(Attach::Loaded, Attach::ReplacedStale),
            stale_flows: 0,
            flows,
            xsks,
            stats,
            kernel: Mapped::new(&kernel)?,
            _prog: prog,
            _link: Some(link),
            mine: Vec::new(),
            _lock: lock,
        })
    }

    /// Releases the set-up lock (held from `open` until the socket is in).
    pub fn unlock(&mut self) {
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self._lock.as_raw_fd(), libc::LOCK_UN) };
    }

    /// Puts this process's socket `xsk`, bound to `queue`, in `tw_xsks`
    /// (the entry goes when the socket closes).
    pub fn set_socket(&mut self, queue: u32, xsk: RawFd) -> Result<(), XdpError> {
        let fd = xsk as u32;
        // SAFETY: an XSKMAP takes a queue index key and a socket fd value.
        os("bpf_map_update_elem (tw_xsks)", unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.xsks.as_raw_fd(),
                (&queue as *const u32).cast(),
                (&fd as *const u32).cast(),
                0,
            )
        })?;
        Ok(())
    }

    /// Steers `key` to this process's socket on `queue`.
    pub fn add_flow(&mut self, key: FlowKey, queue: u32) -> Result<(), XdpError> {
        let mut have = Flow::default();
        let k: *const FlowKey = &key;
        // SAFETY: key and value of the map's sizes.
        let exists = unsafe {
            libbpf_sys::bpf_map_lookup_elem(self.flows.as_raw_fd(), k.cast(), (&mut have as *mut Flow).cast())
        } == 0;
        if exists && have.pid == SHARED_PID {
            return Err(XdpError::FlowShared);
        }
        if exists && have.pid != std::process::id() && pid_alive(have.pid) {
            return Err(XdpError::FlowTaken { pid: have.pid });
        }
        let v = Flow { queue, pid: std::process::id() };
        // SAFETY: key and value of the map's sizes.
        os("bpf_map_update_elem (tw_flows)", unsafe {
            libbpf_sys::bpf_map_update_elem(self.flows.as_raw_fd(), k.cast(), (&v as *const Flow).cast(), 0)
        })?;
        self.mine.push(key);
        Ok(())
    }

    /// Hands `key` back to the kernel for every process: a multicast group
    /// two processes of this host receive, which the program cannot give
    /// to both (it would redirect each datagram to one). Marked shared, so
    /// that no later process takes it either; its datagrams pass to the
    /// kernel and count as flow packets passed, which sends every
    /// transport to its kernel socket.
    pub fn share_flow(&mut self, key: FlowKey) -> Result<(), XdpError> {
        self.mine.retain(|k| *k != key);
        let v = Flow { queue: u32::MAX, pid: SHARED_PID };
        // SAFETY: key and value of the map's sizes.
        os("bpf_map_update_elem (tw_flows, shared)", unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.flows.as_raw_fd(),
                (&key as *const FlowKey).cast(),
                (&v as *const Flow).cast(),
                0,
            )
        })
        .map(drop)
    }

    /// Stops steering `key` (if it is still this process's).
    pub fn remove_flow(&mut self, key: FlowKey) {
        self.mine.retain(|k| *k != key);
        remove_if_mine(self.flows.as_raw_fd(), &key);
    }

    /// Packets of tickwire flows the program passed to the kernel (another
    /// queue), all processes: a memory read.
    pub fn passed_to_kernel(&self) -> u64 {
        self.kernel.get()
    }

    /// Sum over CPUs of a `tw_stats` counter.
    pub fn stat(&self, index: u32) -> u64 {
        // SAFETY: the number of possible CPUs, as the kernel sizes per-CPU values.
        let cpus = unsafe { libbpf_sys::libbpf_num_possible_cpus() }.max(1) as usize;
        let mut v = vec![0u64; cpus];
        // SAFETY: a per-CPU array's value is one u64 per possible CPU.
        let ok = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.stats.as_raw_fd(),
                (&index as *const u32).cast(),
                v.as_mut_ptr().cast(),
            )
        } == 0;
        if ok {
            v.iter().sum()
        } else {
            0
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self._lock.as_raw_fd(), libc::LOCK_EX) };
        for k in &self.mine {
            remove_if_mine(self.flows.as_raw_fd(), k);
        }
        // Our link fd closes with the fields: the last holder's close
        // detaches the program.
    }
}
