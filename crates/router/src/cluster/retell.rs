//! A new link's retelling: what this router's clients want (the patterns
//! told, then the queue groups held), then the routers it links with
//! (ROUTERS, which ends the retelling at the other end), sent in order as
//! the link drains, never more than [`RETELL_HELD`] bytes waiting: a
//! router whose clients hold a million patterns links as one that holds
//! ten, where sending them at once would pass the link's write limit and
//! close it, again at every reconnection.
//!
//! While a link retells, a change to a pattern or group it has passed goes
//! at once (the other end has it as it was); one it has not reached is not
//! sent: the retelling tells it as it is when it gets there, or, withdrawn
//! by then, not at all (ROUTERS withdraws at the other end what was not
//! told again).

use super::agent::ClusterAgent;
use super::link::WRITE_LIMIT;
use tickwire_wire::cluster::ClusterFrame;

/// Bytes a retelling leaves waiting in a link's buffer at most before it
/// waits for the socket to take them.
pub(super) const RETELL_HELD: usize = WRITE_LIMIT / 4;

/// Where a link's retelling is: the last pattern and the last group told,
/// in their order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Retelling {
    pattern: Option<Box<str>>,
    patterns_done: bool,
    group: Option<(Box<str>, Box<str>)>,
    groups_done: bool,
}

impl Retelling {
    /// Whether a change to what was told of `f` goes to the link now: the
    /// retelling passed it (or `f` is no such change).
    pub fn passed(&self, f: &ClusterFrame<'_>) -> bool {
        match f {
            ClusterFrame::Interest(p) | ClusterFrame::Withdraw(p) => {
                self.patterns_done || self.pattern.as_deref().is_some_and(|t| *p <= t)
            }
            ClusterFrame::Group { pattern, group, .. } => {
                self.groups_done || self.group.as_ref().is_some_and(|(tp, tg)| (*pattern, *group) <= (&**tp, &**tg))
            }
            _ => true,
        }
    }
}

impl ClusterAgent {
    /// Goes on with the retelling of the link in `slot`, if it has one,
    /// while its buffer holds less than [`RETELL_HELD`]; ends it with
    /// ROUTERS.
    pub(super) fn retell(&mut self, slot: usize) {
        loop {
            let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) else { return };
            let Some(r) = l.retelling.as_mut() else { return };
            if l.link.parts().2.held() >= RETELL_HELD {
                return;
            }
            let sent = if !r.patterns_done {
                match self.local.told_after(r.pattern.as_deref()) {
                    Some(p) => {
                        r.pattern = Some(p.into());
                        l.send(&ClusterFrame::Interest(p), self.now)
                    }
                    None => {
                        r.patterns_done = true;
                        Ok(())
                    }
                }
            } else if !r.groups_done {
                let after = r.group.as_ref().map(|(p, g)| (&**p, &**g));
                match self.local_groups.told_after(after) {
                    Some((pattern, group, members)) => {
                        r.group = Some((pattern.into(), group.into()));
                        l.send(&ClusterFrame::Group { members, group, pattern }, self.now)
                    }
                    None => {
                        r.groups_done = true;
                        Ok(())
                    }
                }
            } else {
                // The routers this one links with, the other end aside.
                let them = l.peer;
                let list: Vec<(&str, &str)> = self
                    .peers
                    .iter()
                    .enumerate()
                    .filter(|(k, q)| q.link.is_some() && Some(*k as u32) != them)
                    .map(|(_, q)| (q.name.as_str(), q.listen.as_str()))
                    .collect();
                l.retelling = None;
                l.send(&ClusterFrame::Routers(list), self.now)
            };
            if let Err(e) = sent {
                return self.close(slot, &format!("telling the new link: {e}"));
            }
        }
    }

    /// Goes on with every link's retelling (after the links' writes).
    pub(super) fn retell_all(&mut self) {
        for slot in 0..self.links.len() {
            if self.links[slot].as_ref().is_some_and(|l| l.retelling.is_some()) {
                self.retell(slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_goes_at_once_only_to_what_the_retelling_passed() {
        let mut r = Retelling::default();
        let group = |pattern, group| ClusterFrame::Group { members: 1, group, pattern };
        // Nothing told yet: every change waits for the retelling.
        assert!(!r.passed(&ClusterFrame::Interest("a/>")));
        assert!(!r.passed(&group("a/>", "g")));
        assert!(r.passed(&ClusterFrame::Message { sequence: 1, discards: 0, flags: 0, topic: "a", payload: b"" }));
        r.pattern = Some("md/eu/*".into());
        assert!(r.passed(&ClusterFrame::Withdraw("fx/>")), "before it in order: told already");
        assert!(r.passed(&ClusterFrame::Withdraw("md/eu/*")), "the last told");
        assert!(!r.passed(&ClusterFrame::Interest("md/us/*")), "after it: told as it is then");
        r.patterns_done = true;
        assert!(r.passed(&ClusterFrame::Interest("zz")));
        r.group = Some(("md/>".into(), "b".into()));
        assert!(r.passed(&group("md/>", "a")) && r.passed(&group("fx/>", "z")));
        assert!(!r.passed(&group("md/>", "c")) && !r.passed(&group("zz", "a")));
        r.groups_done = true;
        assert!(r.passed(&group("zz", "a")));
    }
}
