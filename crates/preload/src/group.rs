//! Multicast: the groups a UDP socket joins (`IP_ADD_MEMBERSHIP`, left
//! with `IP_DROP_MEMBERSHIP`) on the accelerated interface are steered to
//! its AF_XDP socket too. The kernel joins first (it answers IGMP and
//! keeps the membership); a socket joins before it binds as often as
//! after, so the joins of a socket not yet decided wait here for it.
//!
//! A group stays the kernel's (said once, counted as a multicast
//! fallback) when the join names another interface, filters sources
//! (`IP_ADD_SOURCE_MEMBERSHIP`), or another process of this host receives
//! the same group and port: the program can give a datagram to one
//! socket, the kernel gives each its copy, so both then go through the
//! kernel.
//!
//! Sending to a group goes by the interface the socket names
//! (`IP_MULTICAST_IF`), else by the route.

use crate::config;
use crate::counters::{self, C};
use crate::table;
use libc::{c_int, c_void, socklen_t};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Mutex;

/// What a socket not yet decided waits with, by descriptor.
#[derive(Default, Clone)]
struct Pending {
    /// Groups joined on the accelerated interface.
    joins: Vec<Ipv4Addr>,
    /// `IP_MULTICAST_IF` given by interface index (the kernel gives back
    /// no index): see [`OTHER_INTERFACE`].
    via: Option<Ipv4Addr>,
}

/// Stands for an interface other than the accelerated one, named by index
/// in `IP_MULTICAST_IF`: an address no interface has.
pub(crate) const OTHER_INTERFACE: Ipv4Addr = Ipv4Addr::BROADCAST;

static WAITING: Mutex<Option<HashMap<c_int, Pending>>> = Mutex::new(None);

fn waiting() -> std::sync::MutexGuard<'static, Option<HashMap<c_int, Pending>>> {
    WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn pending(fd: c_int, f: impl FnOnce(&mut Pending)) {
    f(waiting().get_or_insert_with(HashMap::new).entry(fd).or_default());
}

/// The joins `fd` made before it was accelerated (taken, with the rest of
/// what waits for it).
pub(crate) fn take_waiting(fd: c_int) -> Vec<Ipv4Addr> {
    waiting().as_mut().and_then(|m| m.remove(&fd)).map(|p| p.joins).unwrap_or_default()
}

/// `fd` is closed or decided for the kernel: what waits for it goes.
pub(crate) fn forget(fd: c_int) {
    take_waiting(fd);
}

/// `new` is a copy of the candidate `old` (`dup`): what waits for one
/// waits for both.
pub(crate) fn copy_waiting(old: c_int, new: c_int) {
    let mut g = waiting();
    let m = g.get_or_insert_with(HashMap::new);
    match m.get(&old).cloned() {
        Some(p) => m.insert(new, p),
        None => m.remove(&new),
    };
}

/// The group and interface a membership request names: an `ip_mreq`
/// (group, interface address) or an `ip_mreqn` (group, address, index).
fn read_mreq(value: *const c_void, len: socklen_t) -> Option<(Ipv4Addr, Ipv4Addr, c_int)> {
    let ip = |a: libc::in_addr| Ipv4Addr::from(u32::from_be(a.s_addr));
    if value.is_null() {
        return None;
    }
    if len as usize >= std::mem::size_of::<libc::ip_mreqn>() {
        // SAFETY: an ip_mreqn of the program's (length checked), read unaligned.
        let m = unsafe { std::ptr::read_unaligned(value.cast::<libc::ip_mreqn>()) };
        return Some((ip(m.imr_multiaddr), ip(m.imr_address), m.imr_ifindex));
    }
    if len as usize >= std::mem::size_of::<libc::ip_mreq>() {
        // SAFETY: an ip_mreq of the program's (length checked), read unaligned.
        let m = unsafe { std::ptr::read_unaligned(value.cast::<libc::ip_mreq>()) };
        return Some((ip(m.imr_multiaddr), ip(m.imr_interface), 0));
    }
    None
}

/// The accelerated interface's index (0: none).
fn our_index() -> c_int {
    let Some((name, _)) = &config::get().iface else { return 0 };
    let Ok(cname) = std::ffi::CString::new(name.as_str()) else { return 0 };
    // SAFETY: a NUL-terminated name.
    unsafe { libc::if_nametoindex(cname.as_ptr()) as c_int }
}

/// Whether a join of `group` naming `address` and `index` is on the
/// accelerated interface (as the kernel picks: the index, else the
/// address, else the route to the group).
fn on_interface(group: Ipv4Addr, address: Ipv4Addr, index: c_int) -> bool {
    let Some((_, ours)) = &config::get().iface else { return false };
    if index != 0 {
        return our_index() == index;
    }
    if !address.is_unspecified() {
        return address == *ours;
    }
    crate::calls::source_towards(group) == Some(*ours)
}

/// After the kernel's `setsockopt` succeeded on a candidate or an
/// accelerated socket: joins and leaves on the accelerated interface.
pub(crate) fn setsockopt(fd: c_int, name: c_int, value: *const c_void, len: socklen_t) {
    match name {
        libc::IP_ADD_MEMBERSHIP | libc::IP_DROP_MEMBERSHIP => {}
        libc::IP_MULTICAST_IF => {
            let by_index = read_mreq(value, len).map(|(_, _, i)| i).filter(|i| *i != 0);
            let via = by_index.map(|i| {
                if i == our_index() {
                    config::get().iface.as_ref().map_or(OTHER_INTERFACE, |(_, a)| *a)
                } else {
                    OTHER_INTERFACE
                }
            });
            if let Some(s) = table::sock(fd) {
                crate::sock::lock(&s).multicast_if = via.or_else(|| multicast_if(fd));
            } else if table::CANDIDATES.has(fd) {
                pending(fd, |p| p.via = via);
            }
            return;
        }
        libc::IP_ADD_SOURCE_MEMBERSHIP | libc::IP_BLOCK_SOURCE | libc::MCAST_JOIN_SOURCE_GROUP => {
            counters::add(C::FallbacksMulticast, 1);
            config::note(&format!(
                "fd {fd}: source-filtered multicast stays the kernel's (the program cannot filter sources)"
            ));
            leave_ring_for(fd);
            return;
        }
        _ => return,
    }
    if table::FORKED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let Some((group, address, index)) = read_mreq(value, len) else { return };
    if !group.is_multicast() {
        return;
    }
    let join = name == libc::IP_ADD_MEMBERSHIP;
    // A leave names its interface as a join does: one on another
    // interface leaves the steering as it is.
    if !on_interface(group, address, index) {
        return;
    }
    if let Some(s) = table::sock(fd) {
        let mut s = crate::sock::lock(&s);
        if join {
            s.join(fd, group);
        } else {
            s.leave(group);
        }
    } else if table::CANDIDATES.has(fd) {
        pending(fd, |p| {
            p.joins.retain(|g| *g != group);
            if join {
                p.joins.push(group);
            }
        });
    } else if join {
        if let Some(local) = crate::addr::local(fd).filter(|l| l.port() != 0) {
            share(fd, group, local.port());
        }
    }
}

/// `fd` was left to the kernel: the groups it joined are shared.
pub(crate) fn settle_kernel(fd: c_int, port: u16) {
    for g in take_waiting(fd) {
        share(fd, g, port);
    }
}

/// A kernel socket joined `group` on the interface: the group is handed
/// back to the kernel, lest another process's flow take its datagrams.
fn share(fd: c_int, group: Ipv4Addr, port: u16) {
    let cfg = config::get();
    let Some((_, ours)) = &cfg.iface else { return };
    counters::add(C::FallbacksMulticast, 1);
    let why = match tickwire_xdp::share_group(*ours, SocketAddrV4::new(group, port), cfg.mode) {
        Ok(()) => "a kernel socket receives it".to_string(),
        Err(e) => format!("a kernel socket receives it, and it could not be marked shared ({e}): a process here that steers it takes its datagrams"),
    };
    config::note(&format!("fd {fd}: group {group} port {port} stays the kernel's: {why}"));
}

/// Source filtering on `fd`: its groups are the kernel's from here.
fn leave_ring_for(fd: c_int) {
    forget(fd);
    if let Some(s) = table::sock(fd) {
        crate::sock::lock(&s).leave_all();
    }
}

/// The interface address `fd` sends multicast from (`IP_MULTICAST_IF`),
/// if it names one ([`OTHER_INTERFACE`]: another interface, by index).
pub(crate) fn multicast_if(fd: c_int) -> Option<Ipv4Addr> {
    if let Some(via) = waiting().as_ref().and_then(|m| m.get(&fd)).and_then(|p| p.via) {
        return Some(via);
    }
    let mut a = libc::in_addr { s_addr: 0 };
    let mut len = std::mem::size_of::<libc::in_addr>() as socklen_t;
    // SAFETY: getsockopt into an in_addr of its size.
    let r = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, (&mut a as *mut libc::in_addr).cast(), &mut len)
    };
    let ip = Ipv4Addr::from(u32::from_be(a.s_addr));
    (r == 0 && !ip.is_unspecified()).then_some(ip)
}
