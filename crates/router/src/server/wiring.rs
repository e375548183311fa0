//! The routing agents' wiring: a ring each way between every two agents
//! (and, in a cluster, between each and the cluster's agent), their
//! control channels, the password checks they share.

use super::Server;
use crate::access::{AuthWorker, Users};
use crate::agent::{Control, Mailbox, RoutingAgent, Wiring};
use crate::cluster::agent::AgentWiring;
use crate::cluster::ClusterAgent;
use crate::config::RouterConfig;
use crate::peers::{link, Peers};
use crate::routing::Router;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use tickwire_agent::Doorbell;
use tickwire_shm::Context;

impl Server {
    /// Makes the routing agents, their links and channels.
    #[allow(clippy::type_complexity)]
    pub(super) fn agents(
        cfg: &RouterConfig,
        ctx: &Context,
        users: Arc<Users>,
        cluster: Option<crate::cluster::ClusterSettings>,
    ) -> std::io::Result<(Vec<RoutingAgent>, Vec<Mailbox>, Receiver<(u32, String)>, Option<ClusterAgent>)> {
        let n = cfg.agents;
        let counters = Some(Arc::clone(ctx.counters()));
        let (gone_tx, gone) = channel();
        // What wakes each agent, the cluster's last: the routing agent's
        // when it runs on that agent's thread.
        let shared =
            n == 1 && cluster.as_ref().is_some_and(|c| !c.own_thread.unwrap_or_else(|| own_by_default(c, cfg)));
        let mut bells = (0..=n).map(|_| Doorbell::new().map(Arc::new)).collect::<std::io::Result<Vec<_>>>()?;
        if shared {
            bells[n] = Arc::clone(&bells[0]);
        }
        let (controls, mut receivers): (Vec<_>, Vec<_>) = (0..n)
            .map(|k| {
                let (tx, rx) = channel();
                (Mailbox::new(tx, Arc::clone(&bells[k])), Some(rx))
            })
            .unzip();
        // links[from][to], and what each agent reads.
        let mut links: Vec<Vec<Option<_>>> = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        let mut inbound: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        for (from, row) in links.iter_mut().enumerate() {
            for (to, slot) in row.iter_mut().enumerate() {
                if from != to {
                    let (tx, rx) = link(cfg.agent_link_bytes, Some(Arc::clone(&bells[to])));
                    *slot = Some(tx);
                    inbound[to].push(rx);
                }
            }
        }
        // The cluster is agent `n`: a ring each way with every routing agent.
        let (cluster_tx, cluster_rx) = channel();
        let cluster_tx = Mailbox::new(cluster_tx, Arc::clone(&bells[n]));
        let mut wiring = AgentWiring {
            control: cluster_rx,
            tell: controls.clone(),
            from: Vec::new(),
            to: Vec::new(),
            bell: Arc::clone(&bells[n]),
        };
        if cluster.is_some() {
            for (k, (row, inbound)) in links.iter_mut().zip(inbound.iter_mut()).enumerate() {
                let (tx, rx) = link(cfg.agent_link_bytes, Some(Arc::clone(&bells[n])));
                row.push(Some(tx));
                wiring.from.push(rx);
                let (tx, rx) = link(cfg.agent_link_bytes, Some(Arc::clone(&bells[k])));
                wiring.to.push(tx);
                inbound.push(rx);
            }
        }
        let replies = controls.clone();
        let auth = Arc::new(AuthWorker::start(Arc::clone(&users), move |k, r| {
            let _ = replies[k].send(Control::Authenticated(r));
        })?);
        let users = (!users.is_empty()).then_some(users);
        let mut agents = Vec::with_capacity(n);
        for (k, (row, inbound)) in links.into_iter().zip(inbound).enumerate() {
            let limits = (&cfg.limits).into();
            let (router, role) = if n == 1 && cluster.is_none() {
                (Router::new(&cfg.name, limits, counters.clone()), "router".to_owned())
            } else {
                let mut peers = Peers::new(k as u32, row);
                if cluster.is_some() {
                    peers.set_cluster(n as u32);
                }
                let role = if n == 1 { "router".to_owned() } else { format!("router-{k}") };
                (Router::with_peers(&cfg.name, limits, counters.clone(), peers, n as u32), role)
            };
            let mut others: Vec<_> = controls.iter().enumerate().map(|(j, tx)| (j != k).then(|| tx.clone())).collect();
            if cluster.is_some() {
                others.push(Some(cluster_tx.clone()));
            }
            let Some(control) = receivers[k].take() else { unreachable!("one receiver per agent") };
            let bell = Arc::clone(&bells[k]);
            let wiring = Wiring { control, others, inbound, bell, gone: gone_tx.clone(), auth: Arc::clone(&auth) };
            let mut agent = RoutingAgent::new(router, role, wiring)?;
            if shared {
                agent.drain_rings();
            }
            agent.router.set_users(users.clone());
            agent.nats_token_user.clone_from(&cfg.nats_token_user);
            if let Some(c) = &cfg.cache {
                // Checked by `RouterConfig::check`.
                if let Ok(c) = c.to_config() {
                    agent.router.set_cache(crate::cache::LastValues::new(c));
                }
            }
            agents.push(agent);
        }
        let cluster = match cluster {
            Some(c) => {
                let mut c = ClusterAgent::new(c, wiring, counters)?;
                if shared {
                    c.share_thread();
                }
                for a in &mut agents {
                    a.router.set_other_routers(c.other_routers());
                }
                Some(c)
            }
            None => None,
        };
        Ok((agents, controls, gone, cluster))
    }
}

/// `[router.cluster] thread = "auto"`: a thread of its own unless its
/// threads sleep when idle (where sharing saves a wake-up per message;
/// a spinning or yielding thread has a core to itself and gains nothing)
/// and its links are plain TCP (a TLS handshake, which any host that
/// reaches the cluster's port can start, would hold up the clients).
fn own_by_default(c: &crate::cluster::ClusterSettings, cfg: &RouterConfig) -> bool {
    let sleeps = matches!(
        tickwire_agent::Idle::parse(&cfg.idle),
        Ok(tickwire_agent::Idle::Backoff { .. } | tickwire_agent::Idle::Park { .. })
    );
    c.tls.is_some() || !sleeps
}
