//! What every report states about the machine: CPU model, CPU count,
//! kernel, virtualisation, clocksource, and what a clock read costs.

use serde::{Deserialize, Serialize};

/// Facts about the machine a measurement ran on.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Hypervisor, or "none".
    pub virtualization: String,
    /// Current clocksource.
    pub clocksource: String,
    /// Nanoseconds per `Instant::now()` call, measured now.
    pub clock_cost_ns: f64,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
}

/// `Hypervisor vendor:` from lscpu (which reads CPUID), when /sys has no DMI.
fn lscpu_hypervisor() -> Option<String> {
    let out = std::process::Command::new("lscpu").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("Hypervisor vendor:"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

impl Machine {
    /// Reads the facts from /proc and /sys and times the clock.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        };
        let hypervisor_flag = field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor"));
        let vendor = read("/sys/class/dmi/id/sys_vendor");
        let product = read("/sys/class/dmi/id/product_name");
        let virtualization = if !hypervisor_flag {
            "none".to_owned()
        } else if vendor != "unknown" || product != "unknown" {
            format!("{} {}", vendor, product).trim().to_owned()
        } else {
            lscpu_hypervisor().unwrap_or_else(|| "hypervisor (unknown)".to_owned())
        };
        Self {
            cpu: field("model name").unwrap_or_else(|| "unknown".into()),
            cpus: cpuinfo.lines().filter(|l| l.starts_with("processor")).count(),
            kernel: read("/proc/sys/kernel/osrelease"),
            virtualization,
            clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            clock_cost_ns: (crate::base::output::report::clock_cost_ns() * 10.0).round() / 10.0,
        }
    }

    /// One line for reports.
    pub fn summary(&self) -> String {
        format!(
            "{} x{} | Linux {} | virtualization: {} | clocksource {} | Instant::now() {:.1} ns",
            self.cpu, self.cpus, self.kernel, self.virtualization, self.clocksource, self.clock_cost_ns
        )
    }
}

/// Whether `cpu` is in a kernel CPU list (`0-3,8,10-11`).
fn in_list(list: &str, cpu: usize) -> bool {
    list.split(',').any(|part| match part.trim().split_once('-') {
        Some((a, b)) => a.parse().is_ok_and(|a: usize| a <= cpu) && b.parse().is_ok_and(|b: usize| cpu <= b),
        None => part.trim().parse() == Ok(cpu),
    })
}

/// How the two CPUs of a measurement share the hardware, as sysfs says:
/// SMT siblings (one core) or separate cores, and the caches they share.
/// The floors differ with it (a cache line moves within an L2, or through
/// an L3, or across sockets).
pub fn pair(cpus: crate::Cpus) -> String {
    let (a, b) = (cpus.local, cpus.remote);
    let base = format!("/sys/devices/system/cpu/cpu{a}");
    let siblings = read(&format!("{base}/topology/thread_siblings_list"));
    let core = match (siblings.as_str(), in_list(&siblings, b)) {
        ("unknown", _) => "cores unknown",
        (_, true) => "SMT siblings of one core",
        (_, false) => "separate cores (no SMT sibling used)",
    };
    let mut shared = Vec::new();
    for index in 0.. {
        let dir = format!("{base}/cache/index{index}");
        if !std::path::Path::new(&dir).exists() {
            break;
        }
        if in_list(&read(&format!("{dir}/shared_cpu_list")), b) {
            let kind = match read(&format!("{dir}/type")).as_str() {
                "Data" => "d",
                "Instruction" => "i",
                _ => "",
            };
            shared.push(format!("L{}{kind} {}", read(&format!("{dir}/level")), read(&format!("{dir}/size"))));
        }
    }
    let shared = if shared.is_empty() { "no cache".to_owned() } else { shared.join(", ") };
    format!("CPUs {a},{b}: {core}, sharing {shared}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_this_linux_machine() {
        let m = Machine::detect();
        assert!(m.cpus >= 1);
        assert_ne!(m.kernel, "unknown");
        assert!(m.clock_cost_ns > 0.0 && m.clock_cost_ns < 10_000.0);
        assert!(m.summary().contains(&m.kernel));
    }

    #[test]
    fn cpu_lists_are_read_as_the_kernel_writes_them() {
        assert!(in_list("0-3,8,10-11", 2) && in_list("0-3,8,10-11", 8) && in_list("0-3,8,10-11", 11));
        assert!(!in_list("0-3,8,10-11", 9) && !in_list("0", 1) && !in_list("unknown", 0));
    }

    #[test]
    fn a_cpu_is_its_own_sibling_and_shares_its_caches() {
        let p = pair(crate::Cpus { local: 0, remote: 0 });
        assert!(p.starts_with("CPUs 0,0: "), "{p}");
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").exists() {
            assert!(p.contains("SMT siblings"), "{p}");
        }
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/cache/index0").exists() {
            assert!(p.contains("L1"), "{p}");
        }
    }
}
