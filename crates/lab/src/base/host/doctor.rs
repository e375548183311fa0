//! `tickwire lab doctor`: inspects the machine for latency pitfalls, says
//! what to change and why, and changes nothing unless asked. `--apply`
//! writes the suggested values after saving the current ones to a restore
//! file; `--restore FILE` puts them back.
//!
//! Every path is read relative to a root (`/` in production), so tests can
//! run the checks, the apply and the restore against a fake `/proc` and `/sys`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to change.
    Ok,
    /// A change would help; see the advice (and the fix, if any).
    Advice,
    /// For information (nothing a runtime setting can change).
    Info,
}

/// A runtime setting the doctor can change: write `value` to `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fix {
    /// File under the root (e.g. `proc/sys/net/core/busy_poll`).
    pub path: String,
    /// Value to write.
    pub value: String,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What was checked.
    pub check: String,
    /// Outcome.
    pub status: Status,
    /// What was seen.
    pub observed: String,
    /// What to do and why.
    pub advice: String,
    /// What `--apply` would write.
    pub fixes: Vec<Fix>,
}

/// Reads settings under a root.
#[derive(Debug, Clone)]
pub struct Doctor {
    root: PathBuf,
}

impl Default for Doctor {
    fn default() -> Self {
        Self { root: PathBuf::from("/") }
    }
}

/// One entry of a restore file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// File under the root.
    pub path: String,
    /// The value before `--apply`.
    pub old: String,
}

impl Doctor {
    /// A doctor reading paths under `root` (tests use a fake tree).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok().map(|s| s.trim().to_owned())
    }

    fn cpu_dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.root.join("sys/devices/system/cpu"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        n.strip_prefix("cpu").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Runs every check.
    pub fn inspect(&self) -> Vec<Finding> {
        let cpus = self.cpu_dirs();
        let driver = self.read("sys/devices/system/cpu/cpuidle/current_driver").unwrap_or_else(|| "none".into());
        vec![
            self.check_cpus(&cpus),
            self.check_governor(&cpus),
            self.check_c_states(&cpus, &driver),
            self.check_halt_polling(&driver),
            self.check_busy_polling(),
            self.check_irq_affinity(),
            self.check_thp(),
            self.check_clocksource(),
        ]
    }

    /// CPUs and their isolation.
    fn check_cpus(&self, cpus: &[String]) -> Finding {
        let isolated = self.read("sys/devices/system/cpu/isolated").unwrap_or_default();
        Finding {
            check: "cpus".into(),
            status: if cpus.len() >= 2 && !isolated.is_empty() { Status::Ok } else { Status::Info },
            observed: format!(
                "{} CPUs, isolated: {}",
                cpus.len(),
                if isolated.is_empty() { "none" } else { &isolated }
            ),
            advice: "Pin each side of a measurement (and each hot agent) to its own CPU. On a production box, \
                     isolate those CPUs from the scheduler and timer tick (boot: isolcpus=, nohz_full=, rcu_nocbs=)."
                .into(),
            fixes: vec![],
        }
    }

    /// The frequency governor of each CPU.
    fn check_governor(&self, cpus: &[String]) -> Finding {
        let governors: Vec<(String, String)> = cpus
            .iter()
            .filter_map(|c| {
                let p = format!("sys/devices/system/cpu/{c}/cpufreq/scaling_governor");
                self.read(&p).map(|g| (p, g))
            })
            .collect();
        if governors.is_empty() {
            Finding {
                check: "frequency governor".into(),
                status: Status::Info,
                observed: "no cpufreq (typical of a virtual machine: the host decides)".into(),
                advice: "On bare metal, use the performance governor so a CPU that was idle is not slow to answer."
                    .into(),
                fixes: vec![],
            }
        } else {
            let slow: Vec<_> = governors.iter().filter(|(_, g)| g != "performance").collect();
            Finding {
                check: "frequency governor".into(),
                status: if slow.is_empty() { Status::Ok } else { Status::Advice },
                observed: governors.iter().map(|(_, g)| g.as_str()).collect::<Vec<_>>().join(","),
                advice: "A governor other than performance lowers the clock of idle CPUs; the first message after a \
                         pause pays for ramping it up."
                    .into(),
                fixes: slow.iter().map(|(p, _)| Fix { path: p.clone(), value: "performance".into() }).collect(),
            }
        }
    }

    /// Idle states with a long exit latency.
    fn check_c_states(&self, cpus: &[String], driver: &str) -> Finding {
        let mut deep = Vec::new();
        for c in cpus {
            for s in 1..10 {
                let base = format!("sys/devices/system/cpu/{c}/cpuidle/state{s}");
                let Some(lat) = self.read(&format!("{base}/latency")) else { break };
                let lat: u64 = lat.parse().unwrap_or(0);
                let disabled = self.read(&format!("{base}/disable")).as_deref() == Some("1");
                if lat > 10 && !disabled {
                    deep.push(Fix { path: format!("{base}/disable"), value: "1".into() });
                }
            }
        }
        Finding {
            check: "C-states".into(),
            status: if deep.is_empty() { Status::Ok } else { Status::Advice },
            observed: format!("cpuidle driver {driver}; {} enabled states with exit latency over 10 us", deep.len()),
            advice: "Deep C-states save power and cost tens to hundreds of microseconds to leave; disable them on \
                     the CPUs that carry latency-critical work (or boot with processor.max_cstate=1)."
                .into(),
            fixes: deep,
        }
    }

    /// Guest halt polling (VMs).
    fn check_halt_polling(&self, driver: &str) -> Finding {
        match self.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") {
            Some(v) => {
                let ns: u64 = v.parse().unwrap_or(0);
                Finding {
                    check: "guest halt polling".into(),
                    status: if ns >= 200_000 { Status::Ok } else { Status::Advice },
                    observed: format!("guest_halt_poll_ns = {ns} (cpuidle driver {driver})"),
                    advice: "In a VM, an idle vCPU that halts exits to the host, and waking it costs tens of \
                             microseconds. Polling for up to 200 us before halting lets a blocking receiver wake in \
                             a few (on this VM kind, blocking UDP ping-pong goes from about 25 us to about 5 us), \
                             at the cost of CPU time spent polling."
                        .into(),
                    fixes: if ns >= 200_000 {
                        vec![]
                    } else {
                        vec![Fix {
                            path: "sys/module/haltpoll/parameters/guest_halt_poll_ns".into(),
                            value: "200000".into(),
                        }]
                    },
                }
            }
            None => Finding {
                check: "guest halt polling".into(),
                status: Status::Info,
                observed: "haltpoll not loaded".into(),
                advice: "On a VM, the cpuidle-haltpoll driver (boot: cpuidle_haltpoll.force=1) lets idle vCPUs poll \
                         before halting; on bare metal this does not apply."
                    .into(),
                fixes: vec![],
            },
        }
    }

    /// Kernel busy polling of sockets.
    fn check_busy_polling(&self) -> Finding {
        let mut busy = Vec::new();
        let mut seen = Vec::new();
        for knob in ["busy_poll", "busy_read"] {
            let p = format!("proc/sys/net/core/{knob}");
            if let Some(v) = self.read(&p) {
                seen.push(format!("{knob}={v}"));
                if v.parse::<u64>().unwrap_or(0) == 0 {
                    busy.push(Fix { path: p, value: "50".into() });
                }
            }
        }
        Finding {
            check: "socket busy polling".into(),
            status: if busy.is_empty() { Status::Ok } else { Status::Advice },
            observed: if seen.is_empty() { "not available".into() } else { seen.join(", ") },
            advice: "net.core.busy_read/busy_poll make blocking socket reads spin in the kernel for up to N us \
                     before sleeping, cutting wake-up latency for kernel UDP/TCP (tickwire's shared memory does \
                     not need it)."
                .into(),
            fixes: busy,
        }
    }

    /// Where device interrupts go.
    fn check_irq_affinity(&self) -> Finding {
        let default_aff = self.read("proc/irq/default_smp_affinity").unwrap_or_else(|| "unknown".into());
        let irq_lines = self.read("proc/interrupts").map(|s| s.lines().count().saturating_sub(1)).unwrap_or(0);
        Finding {
            check: "IRQ affinity".into(),
            status: Status::Info,
            observed: format!("default_smp_affinity {default_aff}, {irq_lines} interrupt lines"),
            advice: "Steer device interrupts (and irqbalance) away from the CPUs that run hot agents: write a mask \
                     excluding them to /proc/irq/*/smp_affinity. With two CPUs there is nowhere to steer them."
                .into(),
            fixes: vec![],
        }
    }

    /// Transparent huge pages.
    fn check_thp(&self) -> Finding {
        let thp = self.read("sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_else(|| "unknown".into());
        let always = thp.contains("[always]");
        Finding {
            check: "transparent huge pages".into(),
            status: if always { Status::Advice } else { Status::Ok },
            observed: thp.clone(),
            advice: "With THP=always, khugepaged and on-fault compaction can stall a process for milliseconds; \
                     madvise keeps huge pages for the programs that ask for them."
                .into(),
            fixes: if always {
                vec![Fix { path: "sys/kernel/mm/transparent_hugepage/enabled".into(), value: "madvise".into() }]
            } else {
                vec![]
            },
        }
    }

    /// The clock source behind `clock_gettime`.
    fn check_clocksource(&self) -> Finding {
        let cs = self
            .read("sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_else(|| "unknown".into());
        Finding {
            check: "clocksource".into(),
            status: if cs == "tsc" { Status::Ok } else { Status::Advice },
            observed: cs.clone(),
            advice: "tsc makes clock_gettime a vDSO read of a few nanoseconds; other clocksources (hpet, acpi_pm) \
                     trap to the kernel and distort every timestamp."
                .into(),
            fixes: vec![],
        }
    }

    /// Applies every fix after saving the current values to `restore_file`.
    /// Returns what was changed.
    ///
    /// # Errors
    /// If the restore file cannot be written, nothing is changed. A fix that
    /// fails (read-only sysfs, not root) is reported in the error after the
    /// others were applied; the restore file covers those that were.
    pub fn apply(&self, findings: &[Finding], restore_file: &Path) -> Result<Vec<Saved>, String> {
        let mut saved = Vec::new();
        for f in findings.iter().flat_map(|f| &f.fixes) {
            if let Some(old) = self.read(&f.path) {
                saved.push(Saved { path: f.path.clone(), old });
            }
        }
        let json = serde_json::to_string_pretty(&saved).map_err(|e| e.to_string())?;
        std::fs::write(restore_file, json).map_err(|e| format!("{}: {e} (nothing changed)", restore_file.display()))?;
        let mut errors = Vec::new();
        for f in findings.iter().flat_map(|f| &f.fixes) {
            if let Err(e) = std::fs::write(self.root.join(&f.path), &f.value) {
                errors.push(format!("{}: {e}", f.path));
            }
        }
        if errors.is_empty() {
            Ok(saved)
        } else {
            Err(format!("could not apply: {}; restore with --restore {}", errors.join("; "), restore_file.display()))
        }
    }

    /// Writes back the values saved by [`Doctor::apply`].
    ///
    /// # Errors
    /// Unreadable restore file, or writes that fail.
    pub fn restore(&self, restore_file: &Path) -> Result<Vec<Saved>, String> {
        let text = std::fs::read_to_string(restore_file).map_err(|e| format!("{}: {e}", restore_file.display()))?;
        let saved: Vec<Saved> = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", restore_file.display()))?;
        for s in &saved {
            // sysfs shows choices as "always [madvise] never": write the chosen one.
            let value = s.old.split('[').nth(1).and_then(|x| x.split(']').next()).unwrap_or(&s.old);
            std::fs::write(self.root.join(&s.path), value).map_err(|e| format!("{}: {e}", s.path))?;
        }
        Ok(saved)
    }
}

/// jHiccup-style probe: spins on `cpu` for `duration` reading the clock and
/// returns (largest gap, gaps over 100 us, gaps over 1 ms). Large gaps are
/// time the CPU was taken away (host, interrupts, other tasks).
///
/// # Errors
/// If pinning fails.
pub fn hiccups(cpu: usize, duration: Duration) -> Result<(Duration, u64, u64), crate::LabError> {
    let handle = std::thread::spawn(move || {
        tickwire_agent::pin_current_thread(cpu)?;
        let start = Instant::now();
        let mut last = start;
        let (mut max, mut over_100us, mut over_1ms) = (Duration::ZERO, 0, 0);
        while last.duration_since(start) < duration {
            let now = Instant::now();
            let gap = now - last;
            max = max.max(gap);
            over_100us += u64::from(gap > Duration::from_micros(100));
            over_1ms += u64::from(gap > Duration::from_millis(1));
            last = now;
        }
        Ok((max, over_100us, over_1ms))
    });
    handle.join().map_err(|_| crate::LabError::Worker("hiccup probe panicked".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc and /sys per test (tests run in parallel).
    fn fake_root(name: &str) -> PathBuf {
        let r = std::env::temp_dir().join(format!("tw-doctor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&r);
        let w = |p: &str, v: &str| {
            let f = r.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        };
        w("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n");
        w("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n");
        w("sys/devices/system/cpu/cpu0/cpuidle/state1/latency", "2\n");
        w("sys/devices/system/cpu/cpu0/cpuidle/state2/latency", "120\n");
        w("sys/devices/system/cpu/cpu0/cpuidle/state2/disable", "0\n");
        w("sys/devices/system/cpu/isolated", "\n");
        w("sys/module/haltpoll/parameters/guest_halt_poll_ns", "0\n");
        w("proc/sys/net/core/busy_poll", "0\n");
        w("proc/sys/net/core/busy_read", "50\n");
        w("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n");
        w("sys/devices/system/clocksource/clocksource0/current_clocksource", "hpet\n");
        r
    }

    #[test]
    fn finds_the_pitfalls_and_apply_then_restore_round_trips() {
        let root = fake_root("roundtrip");
        let d = Doctor::with_root(&root);
        let f = d.inspect();
        let get = |c: &str| f.iter().find(|x| x.check == c).unwrap().clone();
        assert_eq!(get("frequency governor").fixes.len(), 1, "only cpu0 is slow");
        assert_eq!(
            get("C-states").fixes,
            vec![Fix { path: "sys/devices/system/cpu/cpu0/cpuidle/state2/disable".into(), value: "1".into() }]
        );
        assert_eq!(get("guest halt polling").status, Status::Advice);
        assert_eq!(get("socket busy polling").fixes.len(), 1, "busy_read is already on");
        assert_eq!(get("transparent huge pages").status, Status::Advice);
        assert_eq!(get("clocksource").status, Status::Advice);

        let restore = root.join("restore.json");
        let saved = d.apply(&f, &restore).unwrap();
        assert_eq!(saved.len(), 5);
        assert_eq!(d.read("sys/module/haltpoll/parameters/guest_halt_poll_ns").unwrap(), "200000");
        assert_eq!(d.read("sys/kernel/mm/transparent_hugepage/enabled").unwrap(), "madvise");
        assert!(d.inspect().iter().all(|x| x.fixes.is_empty()), "nothing left to fix after apply");

        d.restore(&restore).unwrap();
        assert_eq!(d.read("sys/module/haltpoll/parameters/guest_halt_poll_ns").unwrap(), "0");
        assert_eq!(d.read("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").unwrap(), "powersave");
        assert_eq!(d.read("sys/kernel/mm/transparent_hugepage/enabled").unwrap(), "always");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn an_unwritable_restore_file_changes_nothing() {
        let root = fake_root("unwritable");
        let d = Doctor::with_root(&root);
        let f = d.inspect();
        assert!(d.apply(&f, Path::new("/nonexistent-dir/restore.json")).unwrap_err().contains("nothing changed"));
        assert_eq!(d.read("sys/module/haltpoll/parameters/guest_halt_poll_ns").unwrap(), "0");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn the_hiccup_probe_measures_something() {
        let (max, _, _) = hiccups(0, Duration::from_millis(50)).unwrap();
        assert!(max > Duration::ZERO);
    }
}
