//! One AF_XDP socket and its UMEM: frames, fill, completion, RX and TX
//! rings (libxdp's ring code, through `xsk-rs`).
//!
//! Frame accounting: half the frames start on the fill ring (the kernel
//! writes received packets into them), half in `free` (for sending). A
//! received frame goes back to the fill ring as soon as its datagram is
//! copied out; a sent frame comes back through the completion ring.
//!
//! All `unsafe` here is xsk-rs's contract: every descriptor passed to a ring
//! or to `data`/`data_mut` came from this socket's own UMEM, and each frame
//! is in exactly one place at a time (fill ring, RX ring, `free`, TX ring or
//! completion ring), so no frame is read and written at once.

use crate::XdpError;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, RawFd};
use xsk_rs::config::{BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

/// Frames in the UMEM.
const FRAMES: u32 = 4096;
/// Bytes per frame (one MTU-sized packet each).
pub(crate) const FRAME_SIZE: u32 = 2048;
const RING: u32 = 2048;
const SOL_XDP: i32 = 283;
const XDP_OPTIONS: i32 = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

/// An AF_XDP socket bound to one queue of one interface.
pub(crate) struct Xsk {
    umem: Umem,
    fill: FillQueue,
    comp: CompQueue,
    tx: TxQueue,
    rx: RxQueue,
    free: Vec<FrameDesc>,
    rx_descs: Vec<FrameDesc>,
    comp_descs: Vec<FrameDesc>,
    out: Vec<FrameDesc>,
    /// Where a frame is written before it is copied into the UMEM (xsk-rs
    /// exposes a frame's buffer only through a cursor).
    scratch: Vec<u8>,
    /// The queue bound.
    pub queue: u32,
    /// The driver took the zero-copy bind.
    pub zero_copy: bool,
}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk").field("queue", &self.queue).field("zero_copy", &self.zero_copy).finish()
    }
}

fn cfg_err(what: &str, e: impl std::fmt::Display) -> XdpError {
    XdpError::Setup(format!("{what}: {e}"))
}

impl Xsk {
    /// Binds the first free queue of `ifname` (of `queues`).
    pub fn open(ifname: &str, queues: u32) -> Result<Self, XdpError> {
        let size = |n| QueueSize::new(n).map_err(|e| cfg_err("ring size", e));
        let umem_cfg = UmemConfig::builder()
            .frame_size(FrameSize::new(FRAME_SIZE).map_err(|e| cfg_err("frame size", e))?)
            .fill_queue_size(size(RING)?)
            .comp_queue_size(size(RING)?)
            .build()
            .map_err(|e| cfg_err("UMEM config", e))?;
        let frames = NonZeroU32::new(FRAMES).ok_or_else(|| XdpError::Setup("no frames".into()))?;
        let sock_cfg = SocketConfig::builder()
            .rx_queue_size(size(RING)?)
            .tx_queue_size(size(RING)?)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(BindFlags::XDP_USE_NEED_WAKEUP)
            .build();
        let iface = Interface::new(std::ffi::CString::new(ifname).map_err(|e| cfg_err("interface name", e))?);
        let mut last = String::new();
        let mut busy_all = true;
        // A socket of a process that just died is released by the kernel a
        // little after the process is gone: while every queue is busy, try
        // again for up to a second.
        let queue_order = (0..20).flat_map(|_| 0..queues.max(1));
        for (attempt, queue) in queue_order.enumerate() {
            if attempt > 0 && queue == 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            // A fresh UMEM per attempt: libxdp hands a UMEM's fill and
            // completion rings to its first socket, failed or not.
            let (umem, mut descs) = Umem::new(umem_cfg, frames, false)
                .map_err(|e| XdpError::Setup(format!("UMEM ({FRAMES} frames): {e}")))?;
            // SAFETY: the UMEM is not shared: this is its only socket, so
            // libxdp owns no program or ring for the pair already.
            match unsafe { Socket::new(sock_cfg, &umem, &iface, queue) } {
                Ok((tx, rx, Some((mut fill, comp)))) => {
                    let fd = tx.fd().as_raw_fd();
                    // libxdp opens it without close-on-exec: a program
                    // exec'd by ours (under `tickwire accel`) would hold
                    // the queue.
                    // SAFETY: F_SETFD on the socket this function opened.
                    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
                    let half = descs.len() / 2;
                    let free = descs.split_off(half);
                    // SAFETY: the descriptors came from this UMEM.
                    let put = unsafe { fill.produce(&descs) };
                    if put != descs.len() {
                        return Err(XdpError::Setup(format!("fill ring took {put} of {} frames", descs.len())));
                    }
                    let n = RING as usize;
                    return Ok(Self {
                        zero_copy: zero_copy(fd),
                        umem,
                        fill,
                        comp,
                        tx,
                        rx,
                        free,
                        rx_descs: descs,
                        comp_descs: vec![FrameDesc::default(); n],
                        out: Vec::with_capacity(n),
                        scratch: vec![0; FRAME_SIZE as usize],
                        queue,
                    });
                }
                Ok(_) => return Err(XdpError::Setup("AF_XDP socket came without fill/completion rings".into())),
                Err(e) => {
                    let busy = std::error::Error::source(&e)
                        .and_then(|s| s.downcast_ref::<std::io::Error>())
                        .is_some_and(|io| io.raw_os_error() == Some(libc::EBUSY));
                    last = e.to_string();
                    if let Some(src) = std::error::Error::source(&e) {
                        last = format!("{last}: {src}");
                    }
                    if !busy {
                        busy_all = false;
                        break;
                    }
                }
            }
        }
        if busy_all {
            last = format!(
                "every queue is taken by another AF_XDP socket (one per queue: another process; \
                 give the interface more queues) ({last})"
            );
        }
        Err(XdpError::Socket { ifname: ifname.to_string(), queues, why: last })
    }

    /// The socket's descriptor (for the XSKMAP and poll).
    pub fn fd(&self) -> RawFd {
        self.tx.fd().as_raw_fd()
    }

    /// Takes received frames; calls `each` with every frame's bytes; gives
    /// the frames back to the fill ring. Returns how many.
    pub fn receive(&mut self, max: usize, mut each: impl FnMut(&[u8])) -> usize {
        let max = max.min(self.rx_descs.len());
        // SAFETY: the descriptors are filled in from this socket's RX ring.
        let n = unsafe { self.rx.consume(&mut self.rx_descs[..max]) };
        for d in &self.rx_descs[..n] {
            // SAFETY: a frame of this UMEM, just received, not on any ring.
            let data = unsafe { self.umem.data(d) };
            each(&data);
        }
        if n > 0 {
            // SAFETY: the same frames, back to the kernel.
            let put = unsafe { self.fill.produce(&self.rx_descs[..n]) };
            debug_assert_eq!(put, n, "the fill ring has room for every frame");
        }
        if self.fill.needs_wakeup() {
            // The driver ran out of fill frames and waits for a poke: a
            // zero-length, non-blocking recvfrom.
            // SAFETY: recvfrom with no buffer on a socket we own.
            unsafe {
                libc::recvfrom(
                    self.fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
        n
    }

    /// Takes completed sends back into the free list.
    fn reclaim(&mut self) {
        // SAFETY: descriptors from this UMEM's completion ring.
        let n = unsafe { self.comp.consume(&mut self.comp_descs) };
        self.free.extend_from_slice(&self.comp_descs[..n]);
    }

    /// Queues frames written by `write` (one per call, `count` calls) on the
    /// TX ring and kicks the kernel if it asks. `write` gets the index and a
    /// frame-sized buffer and returns the frame's length (`None`: stop). Returns (frames queued, kicks made,
    /// ran out of room).
    pub fn send(
        &mut self,
        count: usize,
        mut write: impl FnMut(usize, &mut [u8]) -> Option<usize>,
    ) -> Result<(usize, u32, bool), std::io::Error> {
        let mut kicks = 0;
        if self.free.len() < count {
            self.reclaim();
            if self.free.len() < count && self.tx.needs_wakeup() {
                self.tx.wakeup()?;
                kicks += 1;
                self.reclaim();
            }
        }
        let take = count.min(self.free.len());
        self.out.clear();
        for i in 0..take {
            let mut desc = self.free.pop().expect("counted above");
            {
                // SAFETY: a free frame of this UMEM: on no ring.
                let mut data = unsafe { self.umem.data_mut(&mut desc) };
                let mut cursor = data.cursor();
                cursor.set_pos(0);
                let Some(len) = write(i, &mut self.scratch) else {
                    self.free.push(desc);
                    break;
                };
                std::io::Write::write_all(&mut cursor, &self.scratch[..len])?;
            }
            self.out.push(desc);
        }
        // SAFETY: frames of this UMEM, written above, on no ring.
        let queued = unsafe { self.tx.produce(&self.out) };
        let full = queued < self.out.len() || take < count;
        for d in self.out.drain(queued..) {
            self.free.push(d);
        }
        if queued > 0 && self.tx.needs_wakeup() {
            self.tx.wakeup()?;
            kicks += 1;
        }
        Ok((queued, kicks, full))
    }

    /// The kernel's counters for this socket: (RX ring full or dropped,
    /// fill ring empty).
    pub fn kernel_stats(&self) -> (u64, u64) {
        self.tx
            .fd()
            .xdp_statistics()
            .map(|s| (s.rx_ring_full() + s.rx_dropped(), s.rx_fill_ring_empty_descs()))
            .unwrap_or((0, 0))
    }
}

/// Whether the bind took zero-copy (`XDP_OPTIONS`).
fn zero_copy(fd: RawFd) -> bool {
    let mut opts = 0u32;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: getsockopt writing one u32 into `opts`, `len` its size.
    let r = unsafe { libc::getsockopt(fd, SOL_XDP, XDP_OPTIONS, (&mut opts as *mut u32).cast(), &mut len) };
    r == 0 && opts & XDP_OPTIONS_ZEROCOPY != 0
}

/// Waits until `xsk` or `kernel` is readable or `timeout` passes; returns
/// whether `kernel` is.
pub(crate) fn poll_two(xsk: RawFd, kernel: RawFd, timeout: std::time::Duration) -> std::io::Result<bool> {
    let mut fds = [
        libc::pollfd { fd: xsk, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: kernel, events: libc::POLLIN, revents: 0 },
    ];
    let ms = i32::try_from(timeout.as_millis().max(u128::from(!timeout.is_zero()))).unwrap_or(i32::MAX);
    // SAFETY: two initialised pollfd structs, their count passed.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINTR) { Ok(false) } else { Err(e) };
    }
    Ok(fds[1].revents != 0)
}
