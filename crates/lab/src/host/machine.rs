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
            clock_cost_ns: (crate::output::report::clock_cost_ns() * 10.0).round() / 10.0,
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
}
