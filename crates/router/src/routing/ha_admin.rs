//! The high-availability group's membership, managed by request: the
//! leader answers `_sys/ha/add` and `_sys/ha/remove` (as it answers
//! `_sys/queue/*`, [`super::queue_admin`]), under the ACLs that govern
//! publishing on those topics. The change goes through the group's Raft
//! log (`tickwire_ha::Ha::add_member`), and the answer comes once it
//! committed, or was refused, or after [`CHANGE_DEADLINE`].
//!
//! A member is added with the peer address it listens on, and started
//! beforehand with `--ha-join` (`[router.ha] join = true`): it waits,
//! standing for nothing, until the leader adds it, then catches up from a
//! snapshot. Requests and replies are JSON: [`MemberRequest`] in,
//! [`MemberReply`] back.

use super::replicated::Replication;
use super::Router;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tickwire_ha::MemberChange;

/// The topic prefix of membership requests: `_sys/ha/` + `add` or
/// `remove`.
pub const HA_ADMIN_PREFIX: &str = "_sys/ha/";

/// How long a change may take to commit before its requester is told it
/// did not (the change may still commit later: `tickwire router status`
/// shows the members).
pub const CHANGE_DEADLINE: Duration = Duration::from_secs(10);

/// A request to `_sys/ha/add` or `_sys/ha/remove`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemberRequest {
    /// The member's id.
    pub id: u64,
    /// `add`: the address it listens on for its peers, `HOST:PORT` (an IP
    /// address: every member dials it).
    pub addr: String,
}

/// The leader's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemberReply {
    /// What went wrong, if something did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The voters once the change committed.
    pub members: Vec<u64>,
}

impl MemberReply {
    fn error(why: impl Into<String>) -> Self {
        Self { error: Some(why.into()), ..Self::default() }
    }
}

/// A change proposed and not yet answered.
#[derive(Debug)]
pub(super) struct PendingChange {
    token: u64,
    change: MemberChange,
    /// The requester's inbox.
    inbox: String,
    /// Set at the first housekeeping after the request (ns).
    deadline: Option<u64>,
}

/// Tokens of membership changes: apart from the publishes' batches.
const CHANGE_TOKEN: u64 = 1 << 63;

/// A change as a reply says it.
fn describe(c: MemberChange) -> String {
    match c {
        MemberChange::Added(id, Some(addr)) => format!("adding member {id} at {addr}"),
        MemberChange::Added(id, None) => format!("adding member {id}"),
        MemberChange::Removed(id) => format!("removing member {id}"),
    }
}

impl Replication {
    /// Validates and proposes a change; the answer now if there is one
    /// (a refusal), else later ([`Router::member_changes_done`]).
    fn propose_change(&mut self, op: &str, req: &MemberRequest, inbox: String) -> Option<MemberReply> {
        if !self.is_leader() {
            let leader = match self.leader() {
                0 => "no leader is known yet".to_owned(),
                l => format!("member {l} leads"),
            };
            return Some(MemberReply::error(format!(
                "_sys/ha/{op}: this router (member {}) does not lead its group ({leader}): ask the leader",
                self.me()
            )));
        }
        if req.id == 0 {
            return Some(MemberReply::error(format!("_sys/ha/{op}: id 0 is not a member id")));
        }
        let voters = self.voters.clone();
        let change = match op {
            "add" => {
                let addr: SocketAddr = match req.addr.trim_start_matches("tcp://").parse() {
                    Ok(a) => a,
                    Err(_) => {
                        return Some(MemberReply::error(format!(
                            "_sys/ha/add: address {:?}: an IP address and port, as the member listens for its peers",
                            req.addr
                        )))
                    }
                };
                if voters.contains(&req.id) {
                    return Some(MemberReply::error(format!("member {} is already in the group {voters:?}", req.id)));
                }
                MemberChange::Added(req.id, Some(addr))
            }
            "remove" => {
                if !voters.contains(&req.id) {
                    return Some(MemberReply::error(format!("member {} is not in the group {voters:?}", req.id)));
                }
                if req.id == self.me() {
                    return Some(MemberReply::error(format!(
                        "member {} leads the group: stop it (another member takes over), then remove it there",
                        req.id
                    )));
                }
                if voters.len() == 1 {
                    return Some(MemberReply::error("the group's last member cannot be removed"));
                }
                MemberChange::Removed(req.id)
            }
            _ => return Some(MemberReply::error(format!("_sys/ha/{op}: membership operations are add and remove"))),
        };
        if let Some(p) = self.changes.first() {
            return Some(MemberReply::error(format!(
                "{} is in progress: one change at a time (retry once it is answered)",
                describe(p.change)
            )));
        }
        self.next_change += 1;
        let token = CHANGE_TOKEN | self.next_change;
        match change {
            MemberChange::Added(id, addr) => self.ha.add_member(token, id, addr?),
            MemberChange::Removed(id) => self.ha.remove_member(token, id),
        }
        tracing::info!(member = self.me(), change = %describe(change), "ha: membership change proposed");
        self.changes.push(PendingChange { token, change, inbox, deadline: None });
        None
    }

    /// A change committed: the replies it answers.
    pub(super) fn change_committed(
        &mut self,
        voters: &[u64],
        change: Option<MemberChange>,
    ) -> Vec<(String, MemberReply)> {
        let Some(change) = change else { return Vec::new() };
        let mut out = Vec::new();
        self.changes.retain(|p| {
            let same = match (p.change, change) {
                (MemberChange::Added(a, _), MemberChange::Added(b, _))
                | (MemberChange::Removed(a), MemberChange::Removed(b)) => a == b,
                _ => false,
            };
            if same {
                let mut members = voters.to_vec();
                members.sort_unstable();
                out.push((p.inbox.clone(), MemberReply { error: None, members }));
            }
            !same
        });
        out
    }

    /// A proposal refused: if it was a change, its reply.
    pub(super) fn change_refused(&mut self, token: u64, leader: u64) -> Option<(String, MemberReply)> {
        if token & CHANGE_TOKEN == 0 {
            return None;
        }
        let at = self.changes.iter().position(|p| p.token == token)?;
        let p = self.changes.remove(at);
        let why = if leader == self.me() {
            "a membership change is still being applied (one just committed, or this leader was just elected): \
             retry in a moment"
                .to_owned()
        } else {
            format!("this router no longer leads its group (leader: {leader}, 0 if unknown)")
        };
        Some((p.inbox, MemberReply::error(format!("{} refused: {why}", describe(p.change)))))
    }

    /// Changes past their deadline at `now` (ns): their replies.
    pub(super) fn changes_expired(&mut self, now: u64) -> Vec<(String, MemberReply)> {
        let mut out = Vec::new();
        self.changes.retain_mut(|p| match p.deadline {
            None => {
                p.deadline = Some(now + CHANGE_DEADLINE.as_nanos() as u64);
                true
            }
            Some(d) if now >= d => {
                let why = format!(
                    "{} not committed within {CHANGE_DEADLINE:?} (no majority?): it may still commit; \
                     `tickwire router status` shows the members",
                    describe(p.change)
                );
                out.push((p.inbox.clone(), MemberReply::error(why)));
                false
            }
            Some(_) => true,
        });
        out
    }
}

impl Router {
    /// A request on `_sys/ha/OP` whose reply goes to `inbox`: answered
    /// now, or once the change committed.
    pub(super) fn ha_request(&mut self, op: &str, payload: &[u8], inbox: String) {
        let reply = match self.guaranteed.as_deref_mut().and_then(|g| g.ha.as_deref_mut()) {
            None => Some(MemberReply::error(format!(
                "_sys/ha/{op}: this router is not a member of a high-availability group"
            ))),
            Some(r) => {
                match serde_json::from_slice::<MemberRequest>(if payload.is_empty() { b"{}" } else { payload }) {
                    Ok(req) => r.propose_change(op, &req, inbox.clone()),
                    Err(e) => Some(MemberReply::error(format!("_sys/ha/{op}: not a membership request: {e}"))),
                }
            }
        };
        if let Some(reply) = reply {
            self.answer_member_requests(vec![(inbox, reply)]);
        }
    }

    /// Sends each reply to its requester's inbox.
    pub(super) fn answer_member_requests(&mut self, replies: Vec<(String, MemberReply)>) {
        for (inbox, reply) in replies {
            if let Some(why) = &reply.error {
                tracing::info!(error = %why, "ha: membership request refused");
            }
            let body = serde_json::to_vec(&reply).unwrap_or_default();
            self.deliver_reply(&inbox, &body, 0);
        }
    }

    /// Answers the membership changes past their deadline (housekeeping).
    pub(super) fn expire_member_changes(&mut self, now: u64) {
        let Some(r) = self.guaranteed.as_deref_mut().and_then(|g| g.ha.as_deref_mut()) else { return };
        let replies = r.changes_expired(now);
        self.answer_member_requests(replies);
    }
}
