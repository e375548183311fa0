//! `tickwire router ha add|remove`: the high-availability group's
//! members changed through the leader's own requests (`_sys/ha/*`,
//! [`tickwire_router::routing::ha_admin`]), from wherever a client can
//! reach it. The answer comes once the change committed in the group.

use crate::config::Settings;
use crate::request::Target;
use clap::{Args, Subcommand};
use tickwire_router::routing::ha_admin::{MemberReply, MemberRequest, CHANGE_DEADLINE, HA_ADMIN_PREFIX};

/// A change of the group's members.
#[derive(Debug, Subcommand)]
pub enum HaOp {
    /// Add a member: start it first with --ha-join (and every member in --ha-peer), then add it here, on the leader.
    Add {
        /// The new member, ID=HOST:PORT: its id and the address it listens on for its peers.
        #[arg(value_name = "ID=HOST:PORT")]
        member: String,
        #[command(flatten)]
        at: At,
    },
    /// Remove a member (not the leader itself: stop it first, another takes over).
    Remove {
        /// The member's id.
        id: u64,
        #[command(flatten)]
        at: At,
    },
}

/// The leader to ask, and how to print.
#[derive(Debug, Args)]
pub struct At {
    #[command(flatten)]
    pub(crate) to: Target,
    /// Print the router's answer as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tickwire router ha OP`.
pub fn run(s: &Settings, op: &HaOp) -> Result<(), String> {
    let (name, at, req) = match op {
        HaOp::Add { member, at } => {
            let (id, addr) = member
                .split_once('=')
                .ok_or_else(|| format!("{member:?}: ID=HOST:PORT, the new member's id and peer address"))?;
            let id: u64 = id.trim().parse().map_err(|_| format!("{member:?}: {id:?} is not a member id"))?;
            ("add", at, MemberRequest { id, addr: addr.trim().to_owned() })
        }
        HaOp::Remove { id, at } => ("remove", at, MemberRequest { id: *id, ..MemberRequest::default() }),
    };
    let topic = format!("{HA_ADMIN_PREFIX}{name}");
    let body = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
    // The leader answers once the change committed, or after its own
    // deadline.
    let timeout = CHANGE_DEADLINE + std::time::Duration::from_secs(2);
    let Some(answer) = at.to.ask_router(s, "ha", &topic, &body, (timeout, ""))? else { return Ok(()) };
    let reply: MemberReply =
        serde_json::from_slice(&answer).map_err(|e| format!("{topic}: the router's answer: {e}"))?;
    if let Some(why) = reply.error {
        return Err(why);
    }
    if at.json {
        println!("{}", String::from_utf8_lossy(&answer));
    } else {
        let did = if name == "add" { "added" } else { "removed" };
        println!("member {} {did}: the group's members are now {:?}", req.id, reply.members);
    }
    Ok(())
}
