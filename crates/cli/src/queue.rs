//! `tickwire queue create|list|delete|browse`: durable queues managed
//! through the router's own requests (`_sys/queue/*`,
//! [`tickwire_router::routing::queue_admin`]), from wherever a client can
//! reach the router.

use crate::config::Settings;
use crate::request::Target;
use crate::units::parse_duration;
use clap::{Args, Subcommand, ValueEnum};
use std::time::Duration;
use tickwire_router::routing::queue_admin::{
    AdminReply, FullPolicy, QueueInfo, QueueOptions, QueueRequest, QUEUE_ADMIN_PREFIX,
};

/// `tickwire queue` and its operation.
#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(subcommand)]
    pub(crate) op: QueueOp,
}

/// An operation on durable queues.
#[derive(Debug, Subcommand)]
pub enum QueueOp {
    /// Create a durable queue fed by a topic pattern (consumers bind with `tickwire sub --durable-queue NAME`).
    Create {
        /// The queue's name.
        name: String,
        /// The topic pattern whose guaranteed publishes it takes (levels split by /, * one level, > the rest).
        #[arg(long)]
        topic: String,
        /// One consumer at a time: the first bound takes every message, the next takes over on its death.
        #[arg(long)]
        exclusive: bool,
        /// At most this many messages waiting [default: bounded by the journal's retention only].
        #[arg(long)]
        max_depth: Option<u64>,
        /// What a guaranteed publish to a full queue gets: a refusal, or held unacknowledged until there is room.
        #[arg(long, value_enum, default_value_t = Full::Reject)]
        full: Full,
        #[command(flatten)]
        at: At,
    },
    /// List the durable queues: depth, in flight, consumers, options.
    List {
        #[command(flatten)]
        at: At,
    },
    /// Delete a durable queue (refused while consumers are bound).
    Delete {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        at: At,
    },
    /// Show the oldest messages waiting in a durable queue, without consuming them.
    Browse {
        /// The queue's name.
        name: String,
        /// The most messages to show (at most 1000).
        #[arg(long, default_value_t = 10)]
        count: usize,
        #[command(flatten)]
        at: At,
    },
}

/// The router, and how to print.
#[derive(Debug, Args)]
pub struct At {
    #[command(flatten)]
    pub(crate) to: Target,
    /// How long to wait for the router's answer.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// Print the router's answer as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--full`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Full {
    /// Refuse the publish (the publisher is told, REJECT Limit).
    Reject,
    /// Hold it, unacknowledged, until the queue has room.
    Block,
}

/// Runs `tickwire queue OP`.
pub fn run(s: &Settings, a: &QueueArgs) -> Result<(), String> {
    let (op, at, req) = match &a.op {
        QueueOp::Create { name, topic, exclusive, max_depth, full, at } => {
            let full = match full {
                Full::Reject => FullPolicy::Reject,
                Full::Block => FullPolicy::Block,
            };
            let options = QueueOptions { exclusive: *exclusive, max_depth: max_depth.unwrap_or(0), full };
            let req = QueueRequest { name: name.clone(), topic: topic.clone(), options, ..QueueRequest::default() };
            ("create", at, req)
        }
        QueueOp::List { at } => ("list", at, QueueRequest::default()),
        QueueOp::Delete { name, at } => ("delete", at, QueueRequest { name: name.clone(), ..QueueRequest::default() }),
        QueueOp::Browse { name, count, at } => {
            ("browse", at, QueueRequest { name: name.clone(), count: *count, ..QueueRequest::default() })
        }
    };
    let topic = format!("{QUEUE_ADMIN_PREFIX}{op}");
    let body = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
    let Some(answer) = at.to.ask_router(s, "queue", &topic, &body, (at.timeout, " (--timeout)"))? else {
        return Ok(());
    };
    let reply: AdminReply =
        serde_json::from_slice(&answer).map_err(|e| format!("{topic}: the router's answer: {e}"))?;
    if let Some(why) = reply.error {
        return Err(why);
    }
    if at.json {
        println!("{}", String::from_utf8_lossy(&answer));
        return Ok(());
    }
    match op {
        "browse" => {
            println!("{:>12} {:>10}  {:<24} PAYLOAD", "SEQUENCE", "DELIVERIES", "TOPIC");
            for m in &reply.messages {
                let text =
                    !m.payload.chars().any(|c| (c.is_control() && c != '\t') || c == char::REPLACEMENT_CHARACTER);
                let shown = if text { m.payload.clone() } else { format!("({} bytes)", m.size) };
                println!("{:>12} {:>10}  {:<24} {shown}", m.sequence, m.deliveries, m.topic);
            }
        }
        "delete" => {
            for q in &reply.queues {
                println!("deleted queue {} ({} messages waiting went with it)", q.name, q.depth);
            }
        }
        _ => table(&reply.queues),
    }
    Ok(())
}

fn table(queues: &[QueueInfo]) {
    println!("{:<24} {:<24} {:>10} {:>9} {:>9}  OPTIONS", "QUEUE", "TOPIC", "DEPTH", "IN FLIGHT", "CONSUMERS");
    for q in queues {
        let mut opts = Vec::new();
        if q.options.exclusive {
            opts.push("exclusive".to_owned());
        }
        if q.options.max_depth > 0 {
            let full = match q.options.full {
                FullPolicy::Reject => "reject",
                FullPolicy::Block => "block",
            };
            opts.push(format!("max depth {} then {full}", q.options.max_depth));
        }
        let opts = if opts.is_empty() { "-".to_owned() } else { opts.join(", ") };
        println!("{:<24} {:<24} {:>10} {:>9} {:>9}  {opts}", q.name, q.topic, q.depth, q.in_flight, q.consumers);
    }
}
