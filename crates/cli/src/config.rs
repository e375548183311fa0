//! `tickwire.toml`: defaults for every command, overridden by flags.
//!
//! ```toml
//! dir = "/dev/shm/tickwire"
//! [log]
//! capacity = "16MiB"
//! mtu = "64k"
//! max_message = "4MiB"
//! max_subscribers = 32
//! unblock_timeout = "5s"
//! ```

use crate::units::{parse_duration, parse_size};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use tickwire_shm::LogConfig;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dir: Option<PathBuf>,
    #[serde(default)]
    log: FileLog,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    capacity: Option<String>,
    mtu: Option<String>,
    max_message: Option<String>,
    max_subscribers: Option<usize>,
    unblock_timeout: Option<String>,
}

/// Settings after reading the file.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Directory for logs and counters.
    pub dir: PathBuf,
    /// Log defaults.
    pub log: LogConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Self { dir: PathBuf::from(tickwire_shm::DEFAULT_DIR), log: LogConfig::default() }
    }
}

/// Reads settings from `path` (or defaults if none).
///
/// # Errors
/// A message naming the file and the bad key.
pub fn load(path: Option<&Path>) -> Result<Settings, String> {
    let mut s = Settings::default();
    let Some(path) = path else { return Ok(s) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let f: FileConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(d) = f.dir {
        s.dir = d;
    }
    if let Some(v) = f.log.capacity {
        // Derived defaults (mtu, max_message) shrink to fit a small ring.
        s.log = LogConfig::with_capacity(parse_size(&v)?);
    }
    if let Some(v) = f.log.mtu {
        s.log.mtu = parse_size(&v)?;
    }
    if let Some(v) = f.log.max_message {
        s.log.max_message = parse_size(&v)?;
    }
    if let Some(v) = f.log.max_subscribers {
        s.log.max_subscribers = v;
    }
    if let Some(v) = f.log.unblock_timeout {
        s.log.unblock_timeout = parse_duration(&v)?;
    }
    s.log.validate().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sizes_and_rejects_unknown_keys() {
        let d = std::env::temp_dir().join(format!("twcfg-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("t.toml");
        std::fs::write(&p, "dir = \"/tmp/x\"\n[log]\ncapacity = \"1MiB\"\nmtu = \"4k\"\nunblock_timeout = \"250ms\"\n")
            .unwrap();
        let s = load(Some(&p)).unwrap();
        assert_eq!((s.log.capacity, s.log.mtu), (1 << 20, 4096));
        assert_eq!(s.log.unblock_timeout, std::time::Duration::from_millis(250));
        std::fs::write(&p, "[log]\ncapacitty = \"1MiB\"\n").unwrap();
        assert!(load(Some(&p)).unwrap_err().contains("capacitty"));
        std::fs::write(&p, "[log]\ncapacity = \"1000\"\n").unwrap();
        assert!(load(Some(&p)).unwrap_err().contains("power of two"));
    }
}
