//! The member's address book: where each member of the group listens,
//! kept as the group's membership changes (an added member's address
//! travels in its change, [`crate::Node::propose_member`]), and saved
//! beside the log ([`HaConfig::addresses_path`]) so a restart reaches the
//! members its configuration does not name.
//!
//! At start, the saved book (when a change was ever applied), with the
//! configuration's addresses over it (an operator who moved a host says
//! so there), is kept for the members the log names: a member the
//! configuration names that was removed is not dialed. A snapshot brings
//! the leader's book, for the members added while this one was away.
//!
//! A member removed from its group dials no one (it keeps its book: added
//! again, it takes its peers' links again).

use super::links::Dialed;
use super::Member;
use crate::node::MemberChange;
use crate::{HaConfig, HaError};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;

/// The book's file, beside the log ([`HaConfig::addresses_path`]).
pub(crate) const MEMBERS_FILE: &str = "members";

/// The most members a saved book may name.
const MAX_MEMBERS: usize = 1024;

/// The book to start from: the saved one with the configuration's
/// addresses over it, or the configuration's when none is saved.
///
/// # Errors
/// [`HaError::Config`] naming the file and line of a book that does not
/// parse.
pub(super) fn load(cfg: &HaConfig) -> Result<BTreeMap<u64, SocketAddr>, HaError> {
    let path = cfg.addresses_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(cfg.members.clone()),
        Err(source) => return Err(HaError::Io { what: format!("reading {}", path.display()), source }),
    };
    let mut book = parse(&text).map_err(|why| HaError::Config(format!("{}: {why}", path.display())))?;
    book.extend(cfg.members.iter().map(|(&i, &a)| (i, a)));
    Ok(book)
}

/// Parses a saved book: `ID=ADDRESS` lines.
fn parse(text: &str) -> Result<BTreeMap<u64, SocketAddr>, String> {
    let mut book = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| format!("line {}: {line:?}: {why}", n + 1);
        let (id, addr) = line.split_once('=').ok_or_else(|| bad("not ID=ADDRESS"))?;
        let id: u64 = id.parse().ok().filter(|&i| i != 0).ok_or_else(|| bad("not a member id"))?;
        let addr: SocketAddr = addr.parse().map_err(|_| bad("not an IP address and port"))?;
        if book.insert(id, addr).is_some() {
            return Err(bad("a member named twice"));
        }
        if book.len() > MAX_MEMBERS {
            return Err(bad("too many members"));
        }
    }
    Ok(book)
}

/// Writes the book where [`load`] reads it, whole ([`crate::files::replace`]).
fn save(cfg: &HaConfig, book: &BTreeMap<u64, SocketAddr>) -> std::io::Result<()> {
    let mut text = String::new();
    for (id, addr) in book {
        let _ = writeln!(text, "{id}={addr}");
    }
    crate::files::replace(&cfg.dir, MEMBERS_FILE, text.as_bytes())
}

impl Member {
    /// The group's voters changed: the book follows (an added member's
    /// address in, a removed one's out), links are dialed to the members
    /// new to it and dropped to the ones gone, and the book is saved.
    pub(super) fn members_changed(
        &mut self,
        voters: &[u64],
        change: Option<MemberChange>,
        addresses: &[(u64, SocketAddr)],
    ) {
        let me = self.cfg.id;
        // A snapshot's book fills what this one lacks.
        for (id, addr) in addresses {
            self.cfg.members.entry(*id).or_insert(*addr);
        }
        match change {
            Some(MemberChange::Added(id, Some(addr))) if id != me => {
                self.cfg.members.insert(id, addr);
            }
            Some(MemberChange::Removed(id)) if id != me => {
                self.cfg.members.remove(&id);
            }
            _ => {}
        }
        if change == Some(MemberChange::Removed(me)) {
            tracing::warn!(member = me, "ha: this member was removed from its group: it no longer votes or stands");
        }
        self.keep_members(voters);
        for id in voters {
            if !self.cfg.members.contains_key(id) {
                tracing::warn!(
                    member = me,
                    peer = id,
                    "ha: a member of the group without a known peer address: name it in ha.peers"
                );
            }
        }
        self.sync_links();
        self.node.set_addresses(&self.cfg.members);
        if let Err(e) = save(&self.cfg, &self.cfg.members) {
            tracing::error!(member = me, file = %self.cfg.addresses_path().display(), error = %e, "ha: the members' addresses not saved (a restart dials its configured peers)");
        }
    }

    /// The book keeps the `voters` (and this member), or all it has when
    /// this member is not among them (removed: it dials no one then).
    pub(super) fn keep_members(&mut self, voters: &[u64]) {
        let me = self.cfg.id;
        self.out = !voters.is_empty() && !voters.contains(&me);
        if !self.out && !voters.is_empty() {
            self.cfg.members.retain(|id, _| *id == me || voters.contains(id));
        }
    }

    /// A dialed link to each member in the book but this one, at its
    /// address, unless this member is out of its group; none to anyone
    /// else, and the links members no longer in the book dialed closed.
    pub(super) fn sync_links(&mut self) {
        let me = self.cfg.id;
        let out = self.out;
        for i in 0..self.dialed.len() {
            let (id, addr) = (self.dialed[i].id, self.dialed[i].addr);
            match self.cfg.members.get(&id).filter(|_| !out) {
                Some(&a) if a == addr && !self.dialed[i].retired => {}
                Some(&a) => {
                    if self.dialed[i].stream.is_some() {
                        self.drop_link(i);
                    }
                    self.dialed[i].addr = a;
                    self.dialed[i].retired = false;
                    self.dialed[i].retry_at = 0;
                }
                None if !self.dialed[i].retired => {
                    if self.dialed[i].stream.is_some() {
                        self.drop_link(i);
                    }
                    self.dialed[i].retired = true;
                }
                None => {}
            }
        }
        let known: Vec<(u64, SocketAddr)> = self
            .cfg
            .members
            .iter()
            .filter(|(&id, _)| !out && id != me && !self.dialed.iter().any(|d| d.id == id))
            .map(|(&id, &addr)| (id, addr))
            .collect();
        for (id, addr) in known {
            self.dialed.push(Dialed::new(id, addr));
        }
        let gone: Vec<usize> = self
            .accepted
            .iter()
            .filter(|(_, a)| a.from.is_some_and(|f| !self.cfg.members.contains_key(&f)))
            .map(|(&k, _)| k)
            .collect();
        self.links.disconnects += self.close_accepted(&gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_book_parses_and_a_bad_line_is_named() {
        let b = parse("1=127.0.0.1:7401\n\n4=[::1]:7404\n").unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[&4], "[::1]:7404".parse().unwrap());
        assert!(parse("1=127.0.0.1:7401\nx=1.2.3.4:5\n")
            .unwrap_err()
            .starts_with("line 2: \"x=1.2.3.4:5\": not a member id"));
        assert!(parse("0=1.2.3.4:5").unwrap_err().contains("not a member id"));
        assert!(parse("1=host:5").unwrap_err().contains("not an IP address"));
        assert!(parse("1=1.2.3.4:5\n1=1.2.3.4:6").unwrap_err().contains("twice"));
    }

    #[test]
    fn the_saved_book_is_the_groups_and_the_configuration_moves_addresses() {
        let dir = std::env::temp_dir().join(format!("tw-ha-book-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = |p: u16| -> SocketAddr { format!("127.0.0.1:{p}").parse().unwrap() };
        let mut cfg = HaConfig::new("g", 1, [(1, a(1)), (2, a(2)), (3, a(3))].into(), &dir);
        assert_eq!(load(&cfg).unwrap(), cfg.members, "no book saved: the configuration's");
        // Member 4 was added; 2 has moved since (the configuration says
        // so); which of them are members is the log's to say.
        save(&cfg, &[(1, a(1)), (2, a(2)), (4, a(4))].into()).unwrap();
        cfg.members.insert(2, a(22));
        let book = load(&cfg).unwrap();
        assert_eq!(book, [(1, a(1)), (2, a(22)), (3, a(3)), (4, a(4))].into());
        std::fs::write(cfg.addresses_path(), "1=nowhere\n").unwrap();
        let e = load(&cfg).unwrap_err().to_string();
        assert!(e.contains("members: line 1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
