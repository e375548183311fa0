//! `tickwire accel [--interface IF] [--] PROGRAM ARGS...`: runs an
//! unmodified program with `libtickwire_preload.so` in `LD_PRELOAD`, so
//! its UDP sockets on the interface go over AF_XDP (crates/preload).

use clap::Args;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The library's file name.
const LIBRARY: &str = "libtickwire_preload.so";

#[derive(Debug, Args)]
pub struct AccelArgs {
    /// The interface whose UDP sockets go over AF_XDP [default: the default route's].
    #[arg(long, value_name = "IF")]
    interface: Option<String>,
    /// Microseconds a blocking receive, poll or epoll_wait spins on the rings before it blocks (0: no spin).
    #[arg(long, value_name = "US", default_value_t = 100)]
    spin_us: u64,
    /// XDP mode: auto (native if the driver has it), native or generic.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "native", "generic"])]
    xdp_mode: String,
    /// A line on stderr for each socket accelerated.
    #[arg(long)]
    verbose: bool,
    /// The preload library [default: libtickwire_preload.so beside this binary, or in ../lib/tickwire].
    #[arg(long, value_name = "FILE", env = "TICKWIRE_PRELOAD")]
    library: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

/// The interface of the default IPv4 route (`/proc/net/route`).
fn default_interface() -> Option<String> {
    let routes = std::fs::read_to_string("/proc/net/route").ok()?;
    routes.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_owned())
    })
}

fn library(given: Option<&PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return if p.is_file() { Ok(p.clone()) } else { Err(format!("{}: no such library", p.display())) };
    }
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let dir = exe.parent().ok_or("this binary has no directory")?;
    let tried = [dir.join(LIBRARY), dir.join("../lib/tickwire").join(LIBRARY)];
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "{LIBRARY} is not beside {} nor in ../lib/tickwire (build it: cargo build --release -p tickwire-preload; or --library FILE)",
            exe.display()
        )
    })
}

/// Replaces this process with the program (returns only on failure).
pub fn run(s: &crate::config::Settings, a: &AccelArgs) -> Result<(), String> {
    let lib = library(a.library.as_ref())?;
    let interface = match &a.interface {
        Some(i) => i.clone(),
        None => default_interface().ok_or("no default route: name the interface (--interface IF)")?,
    };
    if !std::path::Path::new("/sys/class/net").join(&interface).exists() {
        return Err(format!("--interface {interface}: no such interface here"));
    }
    // Ahead of what the environment preloads already.
    let mut preload = OsString::from(lib.canonicalize().unwrap_or(lib));
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let (program, args) = a.command.split_first().ok_or("no program to run")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env("LD_PRELOAD", preload)
        .env("TICKWIRE_ACCEL_INTERFACE", &interface)
        .env("TICKWIRE_ACCEL_SPIN_US", a.spin_us.to_string())
        .env("TICKWIRE_ACCEL_XDP_MODE", &a.xdp_mode)
        .env("TICKWIRE_ACCEL_DIR", &s.dir);
    if a.verbose {
        cmd.env("TICKWIRE_ACCEL_VERBOSE", "1");
    }
    let e = cmd.exec();
    Err(format!("{}: {e}", program.to_string_lossy()))
}
