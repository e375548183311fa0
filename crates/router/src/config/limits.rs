//! `[router.limits]`: what one client may hold and how long it may take
//! (see the table in the module above for every key and its default).

use super::ConfigError;
use crate::routing::Limits;
use serde::Deserialize;
use std::time::Duration;
use tickwire_topic::Pattern;
use tickwire_wire::client::SlowConsumer;

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// See [`Limits::max_frame`].
    pub max_frame: usize,
    /// See [`Limits::queue_bytes`].
    pub queue_bytes: usize,
    /// See [`Limits::max_subscriptions`].
    pub max_subscriptions: usize,
    /// See [`Limits::topic_counters`].
    pub topic_counters: usize,
    /// See [`Limits::slow_consumer`].
    pub slow_consumer: SlowConsumer,
    /// See [`Limits::conflate`].
    pub conflate: Vec<String>,
    /// See [`Limits::back_pressure_timeout`]: a duration (`"5s"`,
    /// `"500ms"`) or `"never"`.
    pub back_pressure_timeout: String,
    /// See [`Limits::hello_timeout`]: a duration of at least 100 ms
    /// (`"2s"`, `"300ms"`).
    pub hello_timeout: String,
    /// See [`Limits::heartbeat_interval`]: `"0s"` (off) or a duration of
    /// at least 10 ms.
    pub heartbeat_interval: String,
    /// TCP and TLS connections open at once, router-wide; past it a new
    /// connection is refused (CLOSE `Limit`, or a reset over TLS). Absent:
    /// the descriptor limit's share ([`LimitsConfig::max_connections`]).
    pub max_connections: Option<usize>,
    /// TCP and TLS connections open at once from one IP address (0: no
    /// limit).
    pub max_connections_per_address: usize,
}

/// Descriptors a router keeps out of `max_connections`' share of
/// `RLIMIT_NOFILE`: its listeners, counters file, lock, journal segments,
/// metrics connections, logs, shared-memory clients, the agents' epoll
/// and the spare it refuses connections with.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// The largest `max_connections` the descriptor limit leads to (an
/// unlimited `RLIMIT_NOFILE` is no reason to take a million connections).
pub const MAX_CONNECTIONS_CEILING: usize = 1 << 20;

/// The connections a soft `RLIMIT_NOFILE` of `soft` leaves room for:
/// `soft` less [`RESERVED_DESCRIPTORS`] (at least 1, at most
/// [`MAX_CONNECTIONS_CEILING`]).
pub fn descriptor_share(soft: u64) -> usize {
    let share = soft.saturating_sub(RESERVED_DESCRIPTORS).max(1);
    usize::try_from(share).unwrap_or(usize::MAX).min(MAX_CONNECTIONS_CEILING)
}

/// `limits.heartbeat_interval` read.
fn heartbeat_interval(v: &str) -> Result<Duration, ()> {
    match humantime::parse_duration(v) {
        Ok(d) if d.is_zero() || d >= Duration::from_millis(10) => Ok(d),
        _ => Err(()),
    }
}

/// The shortest `limits.hello_timeout`.
pub const MIN_HELLO_TIMEOUT: Duration = Duration::from_millis(100);

/// `limits.hello_timeout` read.
fn hello_timeout(v: &str) -> Result<Duration, ()> {
    match humantime::parse_duration(v) {
        Ok(d) if d >= MIN_HELLO_TIMEOUT => Ok(d),
        _ => Err(()),
    }
}

/// `limits.back_pressure_timeout` read: `None` for `"never"`.
fn back_pressure_timeout(v: &str) -> Result<Option<Duration>, ()> {
    if v == "never" {
        return Ok(None);
    }
    match humantime::parse_duration(v) {
        Ok(d) if d >= Duration::from_millis(1) => Ok(Some(d)),
        _ => Err(()),
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = Limits::default();
        Self {
            max_frame: l.max_frame,
            queue_bytes: l.queue_bytes,
            max_subscriptions: l.max_subscriptions,
            topic_counters: l.topic_counters,
            slow_consumer: l.slow_consumer,
            conflate: Vec::new(),
            back_pressure_timeout: l
                .back_pressure_timeout
                .map_or_else(|| "never".into(), |d| humantime::format_duration(d).to_string()),
            hello_timeout: humantime::format_duration(l.hello_timeout).to_string(),
            heartbeat_interval: humantime::format_duration(l.heartbeat_interval).to_string(),
            max_connections: None,
            max_connections_per_address: 0,
        }
    }
}

impl From<&LimitsConfig> for Limits {
    fn from(c: &LimitsConfig) -> Self {
        Limits {
            max_frame: c.max_frame,
            queue_bytes: c.queue_bytes,
            max_subscriptions: c.max_subscriptions,
            topic_counters: c.topic_counters,
            slow_consumer: c.slow_consumer,
            // Checked by `RouterConfig::check`.
            conflate: c.conflate.iter().filter_map(|p| Pattern::parse(p).ok()).collect(),
            back_pressure_timeout: back_pressure_timeout(&c.back_pressure_timeout)
                .unwrap_or(Limits::default().back_pressure_timeout),
            hello_timeout: hello_timeout(&c.hello_timeout).unwrap_or(Limits::default().hello_timeout),
            heartbeat_interval: heartbeat_interval(&c.heartbeat_interval)
                .unwrap_or(Limits::default().heartbeat_interval),
        }
    }
}

impl LimitsConfig {
    /// The `max_connections` in force under a soft `RLIMIT_NOFILE` of
    /// `soft`: the key's value, never more than [`descriptor_share`]
    /// (`None` when it is, with the line saying it was lowered), or that
    /// share when the key is absent.
    pub fn max_connections(&self, soft: u64) -> (usize, Option<String>) {
        let share = descriptor_share(soft);
        match self.max_connections {
            None => (share, None),
            Some(n) if n <= share => (n, None),
            Some(n) => (
                share,
                Some(format!(
                    "limits.max_connections = {n} is more than the descriptor limit leaves room for \
                     (RLIMIT_NOFILE {soft} less {RESERVED_DESCRIPTORS} reserved): {share} in force"
                )),
            ),
        }
    }

    /// Checks the values that need no other table (`max_frame` is checked
    /// against `ipc_log_bytes` by the caller).
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the first bad key.
    pub fn check(&self) -> Result<(), ConfigError> {
        fn bad(key: &'static str, value: &dyn std::fmt::Display, why: &'static str) -> Result<(), ConfigError> {
            Err(ConfigError::Value { key, value: value.to_string(), why })
        }
        let l = self;
        if l.queue_bytes < l.max_frame {
            return bad("limits.queue_bytes", &l.queue_bytes, "at least limits.max_frame");
        }
        if let Some(p) = l.conflate.iter().find(|p| Pattern::parse(p).is_err()) {
            return bad("limits.conflate", p, "topic patterns (see docs/topics.md)");
        }
        if back_pressure_timeout(&l.back_pressure_timeout).is_err() {
            return bad(
                "limits.back_pressure_timeout",
                &l.back_pressure_timeout,
                "a duration of at least 1ms (\"5s\", \"500ms\") or \"never\"",
            );
        }
        if hello_timeout(&l.hello_timeout).is_err() {
            return bad("limits.hello_timeout", &l.hello_timeout, "a duration of at least 100ms (\"2s\", \"300ms\")");
        }
        if l.max_connections == Some(0) {
            return bad("limits.max_connections", &0, "at least 1 (leave it out for the descriptor limit's share)");
        }
        if heartbeat_interval(&l.heartbeat_interval).is_err() {
            return bad(
                "limits.heartbeat_interval",
                &l.heartbeat_interval,
                "\"0s\" (off) or a duration of at least 10ms (\"5s\")",
            );
        }
        Ok(())
    }
}
