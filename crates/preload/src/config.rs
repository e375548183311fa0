//! What `tickwire accel` tells the library, in its environment, read once:
//! the interface to accelerate, how long to spin before blocking, the XDP
//! mode, whether to say what it does. And the one-line notes it writes to
//! standard error, each reason once.

use std::net::Ipv4Addr;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tickwire_xdp::XdpMode;

/// The interface (`TICKWIRE_ACCEL_INTERFACE`); none: nothing is accelerated.
pub(crate) const INTERFACE: &str = "TICKWIRE_ACCEL_INTERFACE";
/// Microseconds a blocking receive or readiness call spins on the rings
/// before it blocks (`TICKWIRE_ACCEL_SPIN_US`, default 100; 0: no spin).
pub(crate) const SPIN_US: &str = "TICKWIRE_ACCEL_SPIN_US";
/// `auto`, `native` or `generic` (`TICKWIRE_ACCEL_XDP_MODE`).
pub(crate) const XDP_MODE: &str = "TICKWIRE_ACCEL_XDP_MODE";
/// `1`: a line for each socket accelerated (`TICKWIRE_ACCEL_VERBOSE`).
pub(crate) const VERBOSE: &str = "TICKWIRE_ACCEL_VERBOSE";

/// The settings.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The interface and its IPv4 address (None: not found, said once).
    pub iface: Option<(String, Ipv4Addr)>,
    pub spin: Duration,
    pub mode: XdpMode,
    pub verbose: bool,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The settings, read the first time.
pub(crate) fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let spin = match var(SPIN_US).map(|v| v.parse::<u64>()) {
            None => 100,
            Some(Ok(us)) => us.min(1_000_000),
            Some(Err(_)) => {
                note(&format!("{SPIN_US}={:?} is not a number of microseconds: 100 used", var(SPIN_US)));
                100
            }
        };
        let mode = match var(XDP_MODE).as_deref() {
            None | Some("auto") => XdpMode::Auto,
            Some("native") => XdpMode::Native,
            Some("generic") => XdpMode::Generic,
            Some(other) => {
                note(&format!("{XDP_MODE}={other:?} is not auto, native or generic: auto used"));
                XdpMode::Auto
            }
        };
        let iface = var(INTERFACE).and_then(|name| match ipv4_of(&name) {
            Some(a) => Some((name, a)),
            None => {
                note(&format!("interface {name:?} has no IPv4 address here: every socket stays the kernel's"));
                None
            }
        });
        Config { iface, spin: Duration::from_micros(spin), mode, verbose: var(VERBOSE).as_deref() == Some("1") }
    })
}

/// The first IPv4 address of interface `name`.
fn ipv4_of(name: &str) -> Option<Ipv4Addr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = head;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs made, not yet freed.
        let a = unsafe { &*p };
        p = a.ifa_next;
        if a.ifa_addr.is_null() || a.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let n = unsafe { std::ffi::CStr::from_ptr(a.ifa_name) };
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family
        // says its type.
        let family = unsafe { (*a.ifa_addr).sa_family };
        if n.to_bytes() == name.as_bytes() && i32::from(family) == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*a.ifa_addr.cast::<libc::sockaddr_in>() };
            found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            break;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}

static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// One line on standard error, once per text.
pub(crate) fn note(text: &str) {
    let mut said = SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.iter().any(|s| s == text) || said.len() > 256 {
        return;
    }
    said.push(text.to_owned());
    eprintln!("tickwire accel: {text}");
}
