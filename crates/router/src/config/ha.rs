//! `[router.ha]`: the high-availability group this router is a member of
//! (see `tickwire_ha` and `routing::replicated`).

use super::ConfigError;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;
use tickwire_ha::HaConfig;

/// `[router.ha]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaTable {
    /// The group's name (members of another group are refused).
    pub group: String,
    /// This router's member id.
    pub node: u64,
    /// Every member's peer address, `ID=HOST:PORT`, this one's included.
    pub peers: Vec<String>,
    /// One Raft tick.
    pub tick: String,
    /// Ticks of a leader's silence before an election (randomised up to
    /// twice this); a leader without a majority for this long steps down.
    pub election_ticks: usize,
    /// Ticks between heartbeats.
    pub heartbeat_ticks: usize,
    /// The most entry bytes a member's Raft log holds: past it, what the
    /// journal applied is dropped even if a member lacks it (that member
    /// then catches up from a snapshot).
    pub log_bytes: u64,
    /// Entry bytes a follower keeps behind what it applied (for the
    /// members it may lead one day).
    pub follower_log_bytes: u64,
    /// This router joins a running group: it waits, standing for
    /// nothing, until the leader adds it (`tickwire router ha add`), then
    /// catches up from a snapshot. (Ignored once its log names its
    /// members.)
    pub join: bool,
}

impl Default for HaTable {
    fn default() -> Self {
        let d = HaConfig::new("", 0, Default::default(), "");
        Self {
            group: String::new(),
            node: 0,
            peers: Vec::new(),
            tick: humantime::format_duration(d.tick).to_string(),
            election_ticks: d.election_ticks,
            heartbeat_ticks: d.heartbeat_ticks,
            log_bytes: d.max_log_bytes,
            follower_log_bytes: d.keep_bytes,
            join: false,
        }
    }
}

impl HaTable {
    /// The member's configuration, its log in `journal_dir/raft`, written
    /// ahead with `fdatasync` unless the journal's policy is `os`.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the key.
    pub fn to_config(&self, journal_dir: &Path, sync: bool) -> Result<HaConfig, ConfigError> {
        let bad = |key: &'static str, value: &dyn std::fmt::Display, why: &'static str| ConfigError::Value {
            key,
            value: value.to_string(),
            why,
        };
        let mut members = std::collections::BTreeMap::new();
        for p in &self.peers {
            let (id, addr) = tickwire_ha::parse_member(p).map_err(|_| bad("ha.peers", p, "ID=HOST:PORT"))?;
            if members.insert(id, addr).is_some() {
                return Err(bad("ha.peers", p, "each member id once"));
            }
        }
        if !members.contains_key(&self.node) {
            return Err(bad("ha.node", &self.node, "one of the ids in ha.peers (every member, this one included)"));
        }
        let tick: Duration =
            humantime::parse_duration(&self.tick).map_err(|_| bad("ha.tick", &self.tick, "a duration such as 10ms"))?;
        let mut cfg = HaConfig::new(&self.group, self.node, members, journal_dir.join("raft"));
        cfg.sync = sync;
        cfg.tick = tick;
        cfg.election_ticks = self.election_ticks;
        cfg.heartbeat_ticks = self.heartbeat_ticks;
        if self.log_bytes < 1 << 20 {
            return Err(bad("ha.log_bytes", &self.log_bytes, "at least 1048576 (an append carries up to 1 MiB)"));
        }
        cfg.max_log_bytes = self.log_bytes;
        cfg.keep_bytes = self.follower_log_bytes.min(self.log_bytes);
        cfg.join = self.join;
        if let Err(why) = cfg.validate() {
            tracing::error!("[router.ha]: {why}");
            return Err(bad(
                "ha",
                &self.group,
                "a group of 1 to 64 bytes, a positive tick, election_ticks > heartbeat_ticks > 0",
            ));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_must_be_among_the_peers_and_each_id_once() {
        let t = HaTable {
            group: "ldn".into(),
            node: 2,
            peers: vec!["1=127.0.0.1:7401".into(), "2=127.0.0.1:7402".into()],
            ..HaTable::default()
        };
        let c = t.to_config(Path::new("/j"), true).unwrap();
        assert_eq!((c.id, c.members.len(), c.dir.as_path()), (2, 2, Path::new("/j/raft")));
        let e = HaTable { node: 3, ..t.clone() }.to_config(Path::new("/j"), true).unwrap_err().to_string();
        assert!(e.starts_with("ha.node = 3"), "{e}");
        let mut twice = t.clone();
        twice.peers.push("2=127.0.0.1:7403".into());
        assert!(twice.to_config(Path::new("/j"), true).unwrap_err().to_string().contains("each member id once"));
    }
}
