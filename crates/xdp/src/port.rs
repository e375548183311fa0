//! One AF_XDP socket per interface per process, shared by every
//! [`XdpTransport`](crate::XdpTransport) of the process on that interface.
//!
//! AF_XDP binds one socket to a (device, queue) pair: a second socket of the
//! same process on the same queue gets `EBUSY`. A process with a publication
//! and a subscription on one interface (a ping-pong, a request-reply pair)
//! therefore shares one: the [`Port`] owns the socket, the program handle
//! and the route cache; its [`Demux`] keeps an inbox per local address for
//! datagrams that arrived while another transport was draining the ring.
//!
//! A group steered here goes back to the kernel when another socket of
//! this host could receive it ([`receivers`]): checked at the join, and
//! by one watcher thread per process every [`WATCH_EVERY`] after it.

use crate::demux::Demux;
use crate::hops::NextHops;
use crate::packet::Checksum;
use crate::program::{FlowKey, Program, XdpMode};
use crate::receivers::{self, WATCH_EVERY};
use crate::xsk::Xsk;
use crate::{Interface, XdpError};
use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex, Weak};
use tickwire_transport::{RecvBatch, XdpStats};

/// The shared state of one interface in this process.
pub(crate) struct Port {
    pub xsk: Xsk,
    pub program: Program,
    pub hops: NextHops,
    pub iface: Interface,
    /// Which local address each received frame is for, and what waits.
    demux: Demux,
    /// Groups steered here, each with its owner's kernel socket (inode),
    /// watched for other receivers.
    watched: Vec<(SocketAddrV4, u64)>,
    pub ip_id: u16,
}

/// A port's key: network namespace (inode) and interface index.
type PortKey = (u64, u32);

/// Process-wide: the port of each interface.
static PORTS: Mutex<Vec<(PortKey, Weak<Mutex<Port>>)>> = Mutex::new(Vec::new());

fn netns_id() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0)
}

/// Locks a port (a panic elsewhere poisons nothing worth stopping for: the
/// rings are consistent between calls).
pub(crate) fn lock(port: &Mutex<Port>) -> std::sync::MutexGuard<'_, Port> {
    port.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Port {
    /// The port of `iface` in this process, if it has one.
    pub fn existing(iface: &Interface) -> Option<Arc<Mutex<Port>>> {
        let key = (netns_id(), iface.index);
        let ports = PORTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ports.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade())
    }

    /// The port of `iface` in this process: the existing one, or a new one
    /// (program opened or joined, socket bound).
    pub fn get(iface: &Interface, mode: XdpMode) -> Result<Arc<Mutex<Port>>, XdpError> {
        let key = (netns_id(), iface.index);
        let mut ports = PORTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ports.retain(|(_, w)| w.strong_count() > 0);
        if let Some(p) = ports.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            if mode != XdpMode::Auto && lock(&p).program.mode != mode {
                return Err(XdpError::Setup(format!(
                    "this process already runs {} in {} mode; asked for {mode}",
                    iface.name,
                    lock(&p).program.mode
                )));
            }
            return Ok(p);
        }
        let mut program = Program::open(iface.index, mode)?;
        let xsk = Xsk::open(&iface.name, iface.queues)?;
        program.set_socket(xsk.queue, xsk.fd())?;
        program.unlock();
        let hops = NextHops::new(iface.index).map_err(|e| XdpError::Setup(format!("rtnetlink: {e}")))?;
        let port = Arc::new(Mutex::new(Port {
            xsk,
            program,
            hops,
            iface: iface.clone(),
            demux: Demux::default(),
            watched: Vec::new(),
            ip_id: 0,
        }));
        ports.push((key, Arc::downgrade(&port)));
        Ok(port)
    }

    /// Steers `local` (destination address and port) to this socket.
    /// One transport per address and port. A multicast group received by
    /// two sockets (of this process or another) is handed back to the
    /// kernel ([`XdpError::FlowShared`]): the program would give each
    /// only some of its datagrams, where kernel sockets both get every one.
    ///
    /// `receivers`, for a group: the inode of the socket bound to it here
    /// and the sockets bound now ([`receivers::bound_now`]); another that
    /// could receive it hands it back to the kernel the same way, and the
    /// group is watched for one after.
    pub fn add(
        &mut self,
        local: SocketAddrV4,
        checksum: Checksum,
        receivers: Option<(u64, &[receivers::Bound])>,
    ) -> Result<(), XdpError> {
        let key = FlowKey::of(local);
        let others = receivers.is_some_and(|(own, bound)| receivers::others(bound, local, own));
        if local.ip().is_multicast() && (self.demux.steers(local) || others) {
            // Two sockets of this process on one group, or another here:
            // the kernel gives each its copy.
            self.program.share_flow(key)?;
            return Err(XdpError::FlowShared);
        }
        if self.demux.steers(local) {
            return Err(XdpError::FlowTaken { pid: std::process::id() });
        }
        match self.program.add_flow(key, self.xsk.queue) {
            Err(XdpError::FlowTaken { .. }) if local.ip().is_multicast() => {
                // A group another process here receives: the same.
                self.program.share_flow(key)?;
                return Err(XdpError::FlowShared);
            }
            r => r?,
        }
        self.demux.add(local, checksum);
        if let Some((own, _)) = receivers.filter(|_| local.ip().is_multicast()) {
            self.watched.push((local, own));
            watch();
        }
        Ok(())
    }

    /// Stops steering `local`, and the groups it joined.
    pub fn remove(&mut self, local: SocketAddrV4) {
        self.program.remove_flow(FlowKey::of(local));
        self.watched.retain(|(w, _)| *w != local);
        for g in self.demux.remove(local) {
            self.watched.retain(|(w, _)| *w != g);
            self.program.remove_flow(FlowKey::of(g));
        }
    }

    /// Steers `group` (a multicast group and the port of `owner`) to
    /// `owner`'s inbox. A group another socket of this host could receive
    /// is handed back to the kernel for every receiver
    /// ([`XdpError::FlowShared`]): each then gets its copy there.
    ///
    /// `(own, bound)`: the owner's socket's inode and the sockets bound
    /// now ([`receivers::bound_now`], read before the port was locked).
    pub fn join(
        &mut self,
        owner: SocketAddrV4,
        group: SocketAddrV4,
        (own, bound): (u64, &[receivers::Bound]),
    ) -> Result<(), XdpError> {
        let key = FlowKey::of(group);
        if self.demux.steers(group) || receivers::others(bound, group, own) {
            // Another socket of this process, or of this host, receives it.
            self.share(group)?;
            return Err(XdpError::FlowShared);
        }
        match self.program.add_flow(key, self.xsk.queue) {
            Ok(()) => {
                self.demux.join(group, owner);
                self.watched.push((group, own));
                watch();
                Ok(())
            }
            Err(XdpError::FlowTaken { .. }) => {
                self.program.share_flow(key)?;
                Err(XdpError::FlowShared)
            }
            Err(e) => Err(e),
        }
    }

    /// Passes `group` to the kernel for every process (see
    /// [`crate::share_group`]).
    ///
    /// What the program steered here before stays its owner's (still in
    /// the ring, read after): the group keeps its place in the
    /// demultiplexer until its owner leaves it. If it cannot be marked,
    /// it stays watched, and the watcher tries again.
    pub fn share(&mut self, group: SocketAddrV4) -> Result<(), XdpError> {
        self.program.share_flow(FlowKey::of(group))?;
        self.watched.retain(|(g, _)| *g != group);
        Ok(())
    }

    /// Stops steering a joined group.
    pub fn leave(&mut self, group: SocketAddrV4) {
        self.watched.retain(|(g, _)| *g != group);
        if self.demux.unjoin(group) {
            self.program.remove_flow(FlowKey::of(group));
        }
    }

    /// Hands back to the kernel the steered groups another socket could
    /// now receive (of `bound`, the sockets bound now); returns them, each
    /// with the error if it could not be marked.
    fn share_received(&mut self, bound: &[receivers::Bound]) -> Vec<(SocketAddrV4, Result<(), XdpError>)> {
        let found: Vec<SocketAddrV4> =
            self.watched.iter().filter(|(g, own)| receivers::others(bound, *g, *own)).map(|(g, _)| *g).collect();
        found.into_iter().map(|g| (g, self.share(g))).collect()
    }

    /// Keeps a datagram for `local` until its next receive; false if its
    /// inbox is full (the datagram is dropped, and counted by the caller).
    pub fn stash(&mut self, local: SocketAddrV4, d: &[u8], from: SocketAddrV4) -> bool {
        self.demux.stash(local, d, from)
    }

    /// Moves `local`'s inbox into `batch`, then drains the RX ring: frames
    /// for `local` go into `batch`, frames for the process's other
    /// addresses into their inboxes. Returns the receive counters of `local`.
    pub fn receive(&mut self, local: SocketAddrV4, batch: &mut RecvBatch) -> XdpStats {
        let Port { xsk, demux, .. } = self;
        demux.take_inbox(local, batch);
        let room = batch.capacity() - batch.len();
        if room > 0 {
            xsk.receive(room, |frame| demux.deliver(local, batch, frame));
        }
        demux.take_stats(local)
    }
}

/// The pid whose watcher runs (a forked child starts its own).
static WATCHER: Mutex<u32> = Mutex::new(0);

/// What the watcher says when it hands a group back (default: stderr).
static SAY: std::sync::OnceLock<fn(bool, &str)> = std::sync::OnceLock::new();

/// `handed`: a group was handed back (else something failed).
fn say(handed: bool, text: &str) {
    match SAY.get() {
        Some(f) => f(handed, text),
        None => eprintln!("tickwire-xdp: {text}"),
    }
}

/// Where the watcher's lines go (once per process; later calls do nothing).
pub(crate) fn set_say(f: fn(bool, &str)) {
    let _ = SAY.set(f);
}

/// Starts this process's watcher if it does not run: a thread with every
/// signal blocked (the program's signals stay the program's), sleeping
/// [`WATCH_EVERY`] between looks, reading the kernel's socket list only
/// while a group is steered.
fn watch() {
    let mut pid = WATCHER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if *pid == std::process::id() {
        return;
    }
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old)).is_ok();
    let started = std::thread::Builder::new().name("tickwire-xdp-watch".into()).spawn(watcher).is_ok();
    if blocked {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    if started {
        *pid = std::process::id();
    } else {
        say(false, "could not start the thread that watches steered groups for other receivers: a receiver that joins later misses them");
    }
}

fn watcher() {
    let netns = netns_id();
    loop {
        std::thread::sleep(WATCH_EVERY);
        let ports: Vec<Arc<Mutex<Port>>> = {
            let ports = PORTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            ports.iter().filter(|(k, _)| k.0 == netns).filter_map(|(_, w)| w.upgrade()).collect()
        };
        if !ports.iter().all(|p| lock(p).watched.is_empty()) {
            let bound = receivers::bound_now();
            for p in &ports {
                // Said with the port unlocked (what is told may take locks
                // of its own).
                let found = lock(p).share_received(&bound);
                for (g, marked) in found {
                    let (ip, port) = (g.ip(), g.port());
                    match marked {
                        Ok(()) => {
                            say(true, &format!(
                                "group {ip} port {port} goes back to the kernel: another socket here receives it"
                            ));
                        }
                        Err(e) => say(false, &format!(
                            "group {ip} port {port}: another socket here receives it, and it could not be handed back to the kernel (tried again in {WATCH_EVERY:?}): {e}"
                        )),
                    }
                }
            }
        }
        // A port whose last transport went meanwhile is dropped here,
        // under the ports' lock, so that `Port::get` never opens its
        // queue again while the old socket still holds it.
        let held = PORTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(ports);
        drop(held);
    }
}
