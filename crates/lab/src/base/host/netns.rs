//! Two network namespaces joined by a veth pair, created for one measurement
//! and removed when dropped, so kernel-socket paths can be measured across a
//! real (virtual) link rather than loopback. Needs root and iproute2.
//!
//! Names carry the creating pid (`tw<pid>a<n>`, `tw<pid>b<n>`), so
//! [`clean_stale`] can remove pairs left by a process that was killed.

use crate::LabError;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A pair of namespaces, `a` (10.77.N.1) and `b` (10.77.N.2), joined by veth.
#[derive(Debug)]
pub struct NetnsPair {
    /// Namespace of the measuring side.
    pub a: String,
    /// Namespace of the far side.
    pub b: String,
    /// Address of `a`'s end.
    pub a_addr: String,
    /// Address of `b`'s end.
    pub b_addr: String,
    /// `a`'s end of the veth pair.
    pub a_dev: String,
    /// `b`'s end.
    pub b_dev: String,
}

fn ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip").args(args).output().map_err(|e| LabError::Usage(format!("ip (iproute2): {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError::Usage(format!(
            "ip {}: {} (network namespaces need root and iproute2)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl NetnsPair {
    /// Creates the namespaces and the link, with loopback and the veth up.
    ///
    /// # Errors
    /// [`LabError::Usage`] naming the `ip` command that failed (not root,
    /// iproute2 missing); whatever was created is removed.
    pub fn create() -> Result<Self, LabError> {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let subnet = (pid.wrapping_mul(31).wrapping_add(n)) % 250 + 1;
        let pair = Self {
            a: format!("tw{pid}a{n}"),
            b: format!("tw{pid}b{n}"),
            a_addr: format!("10.77.{subnet}.1"),
            b_addr: format!("10.77.{subnet}.2"),
            a_dev: format!("tw{pid}v{n}a"),
            b_dev: format!("tw{pid}v{n}b"),
        };
        let (va, vb) = (pair.a_dev.clone(), pair.b_dev.clone());
        ip(&["netns", "add", &pair.a])?;
        // From here on, dropping `pair` removes what exists.
        ip(&["netns", "add", &pair.b])?;
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        ip(&["link", "set", &va, "netns", &pair.a])?;
        ip(&["link", "set", &vb, "netns", &pair.b])?;
        ip(&["-n", &pair.a, "addr", "add", &format!("{}/24", pair.a_addr), "dev", &va])?;
        ip(&["-n", &pair.b, "addr", "add", &format!("{}/24", pair.b_addr), "dev", &vb])?;
        for (ns, dev) in [(&pair.a, &va), (&pair.b, &vb)] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(pair)
    }
}

/// A hub namespace with a bridge and `n` leaf namespaces, each joined to the
/// bridge by a veth pair: one multicast segment, like a switch. The hub is
/// 10.78.S.1 (on the bridge); leaf `i` is 10.78.S.(i+2). Multicast snooping
/// is off, so the bridge floods group traffic to every port.
#[derive(Debug)]
pub struct NetnsStar {
    /// The hub namespace (the sender's side).
    pub hub: String,
    /// The hub's address (on the bridge).
    pub hub_addr: String,
    /// Leaf namespaces and their addresses.
    pub leaves: Vec<(String, String)>,
}

impl NetnsStar {
    /// Creates the hub, the bridge and `n` leaves.
    ///
    /// # Errors
    /// [`LabError::Usage`] naming the `ip` command that failed; whatever
    /// was created is removed.
    pub fn create(n: usize) -> Result<Self, LabError> {
        let pid = std::process::id();
        let h = NEXT.fetch_add(1, Ordering::Relaxed);
        let subnet = (pid.wrapping_mul(17).wrapping_add(h)) % 250 + 1;
        let mut star =
            Self { hub: format!("tw{pid}a{h}"), hub_addr: format!("10.78.{subnet}.1"), leaves: Vec::with_capacity(n) };
        ip(&["netns", "add", &star.hub])?;
        let br = "twbr0";
        ip(&["-n", &star.hub, "link", "add", br, "type", "bridge", "mcast_snooping", "0"])?;
        ip(&["-n", &star.hub, "addr", "add", &format!("{}/24", star.hub_addr), "dev", br])?;
        ip(&["-n", &star.hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &star.hub, "link", "set", br, "up"])?;
        for i in 0..n {
            let m = NEXT.fetch_add(1, Ordering::Relaxed);
            let leaf = format!("tw{pid}b{m}");
            let addr = format!("10.78.{subnet}.{}", i + 2);
            ip(&["netns", "add", &leaf])?;
            star.leaves.push((leaf.clone(), addr.clone()));
            let (vh, vl) = (format!("tw{pid}v{m}h"), format!("tw{pid}v{m}l"));
            ip(&["link", "add", &vh, "type", "veth", "peer", "name", &vl])?;
            ip(&["link", "set", &vh, "netns", &star.hub])?;
            ip(&["link", "set", &vl, "netns", &leaf])?;
            ip(&["-n", &star.hub, "link", "set", &vh, "master", br])?;
            ip(&["-n", &star.hub, "link", "set", &vh, "up"])?;
            ip(&["-n", &leaf, "addr", "add", &format!("{addr}/24"), "dev", &vl])?;
            ip(&["-n", &leaf, "link", "set", "lo", "up"])?;
            ip(&["-n", &leaf, "link", "set", &vl, "up"])?;
        }
        Ok(star)
    }
}

impl Drop for NetnsStar {
    fn drop(&mut self) {
        for (leaf, _) in &self.leaves {
            let _ = ip(&["netns", "del", leaf]);
        }
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth, and with it the pair.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

/// Lists the tickwire namespaces that exist now.
pub fn list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| owner(n).is_some())
        .map(str::to_owned)
        .collect()
}

/// The pid in a tickwire namespace name (`tw<pid>a<n>`).
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("tw")?;
    let end = rest.find(['a', 'b'])?;
    let (pid, tail) = rest.split_at(end);
    (tail.len() > 1 && tail[1..].bytes().all(|b| b.is_ascii_digit())).then_some(())?;
    pid.parse().ok()
}

/// Removes tickwire namespaces whose creating process is gone. Returns their names.
pub fn clean_stale() -> Vec<String> {
    let mut removed = Vec::new();
    for name in list() {
        if let Some(pid) = owner(&name) {
            let alive = tickwire_shm::os::ProcessId { pid, start_time: 0 }.is_alive();
            if !alive && ip(&["netns", "del", &name]).is_ok() {
                removed.push(name);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_owner_pid() {
        assert_eq!(owner("tw1234a0"), Some(1234));
        assert_eq!(owner("tw1234b17"), Some(1234));
        assert_eq!(owner("tw1234x0"), None);
        assert_eq!(owner("other"), None);
        assert_eq!(owner("tw12a"), None);
    }
}
