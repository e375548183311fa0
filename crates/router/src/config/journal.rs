//! `[router.journal]`: guaranteed delivery (see `tickwire_journal` and
//! `routing::guaranteed`).

use super::ConfigError;
use crate::guaranteed::GuaranteedConfig;
use serde::Deserialize;
use std::path::PathBuf;
use tickwire_journal::{JournalConfig, SyncPolicy};

/// `[journal]`: guaranteed delivery (see `tickwire_journal`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalTable {
    /// Its directory.
    pub dir: PathBuf,
    /// `os`, `group` or `fsync`.
    pub sync: String,
    /// Group commit: the longest a record waits for its fsync.
    pub group_interval: String,
    /// Group commit: records that start an fsync sooner.
    pub group_messages: u64,
    /// Segment size, bytes.
    pub segment_bytes: u64,
    /// Bytes kept (0: no limit).
    pub retain_bytes: u64,
    /// Age kept (`"7d"`; `"forever"`: no limit).
    pub retain_age: String,
    /// Start despite damage before the journal's tail (skipped, reported).
    pub skip_corrupt: bool,
    /// Unacknowledged deliveries per durable subscription.
    pub window: usize,
    /// A delivery unacknowledged this long is sent again.
    pub ack_timeout: String,
    /// Deliveries of one message before it goes to `dead/NAME`.
    pub max_deliveries: u32,
    /// The CPU of the journal's sync thread [default: the first routing
    /// agent's, if pinned].
    pub sync_cpu: Option<usize>,
}

impl Default for JournalTable {
    fn default() -> Self {
        let j = JournalConfig::new("");
        let g = GuaranteedConfig::default();
        Self {
            dir: PathBuf::new(),
            sync: "group".into(),
            group_interval: "200us".into(),
            group_messages: 1000,
            segment_bytes: j.segment_bytes,
            retain_bytes: j.retain_bytes.unwrap_or(0),
            retain_age: "forever".into(),
            skip_corrupt: false,
            window: g.window,
            ack_timeout: humantime::format_duration(g.ack_timeout).to_string(),
            max_deliveries: g.max_deliveries,
            sync_cpu: None,
        }
    }
}

impl JournalTable {
    /// A journal in `dir` with the defaults.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), ..Self::default() }
    }

    /// The journal's and guaranteed delivery's configuration.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the bad key.
    pub fn to_config(&self) -> Result<(JournalConfig, GuaranteedConfig), ConfigError> {
        let bad = |key: &'static str, value: &dyn std::fmt::Display, why: &'static str| ConfigError::Value {
            key,
            value: value.to_string(),
            why,
        };
        let duration = |key, v: &str| {
            humantime::parse_duration(v).map_err(|_| bad(key, &v, "a duration such as 200us, 30s or 7d"))
        };
        if self.dir.as_os_str().is_empty() {
            return Err(bad("journal.dir", &"", "the journal's directory"));
        }
        let sync = match self.sync.as_str() {
            "os" => SyncPolicy::Os,
            "fsync" => SyncPolicy::Fsync,
            "group" => SyncPolicy::Group {
                interval: duration("journal.group_interval", &self.group_interval)?,
                messages: self.group_messages.max(1),
            },
            other => return Err(bad("journal.sync", &other, "one of os, group, fsync")),
        };
        if self.segment_bytes < 64 << 10 {
            return Err(bad("journal.segment_bytes", &self.segment_bytes, "at least 65536"));
        }
        if self.window == 0 || self.max_deliveries == 0 {
            return Err(bad("journal.window", &self.window, "window and max_deliveries at least 1"));
        }
        let retain_age = match self.retain_age.as_str() {
            "forever" => None,
            v => Some(duration("journal.retain_age", v)?),
        };
        let j = JournalConfig {
            dir: self.dir.clone(),
            segment_bytes: self.segment_bytes,
            retain_bytes: (self.retain_bytes > 0).then_some(self.retain_bytes),
            retain_age,
            sync,
            skip_corrupt: self.skip_corrupt,
            sync_cpu: self.sync_cpu,
        };
        let g = GuaranteedConfig {
            window: self.window,
            ack_timeout: duration("journal.ack_timeout", &self.ack_timeout)?,
            max_deliveries: self.max_deliveries,
        };
        Ok((j, g))
    }
}
