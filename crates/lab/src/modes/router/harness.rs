//! The client side of `lab router`: every publisher and subscriber
//! session, driven from one pinned thread.
//!
//! How the harness drives its sessions (the issue asks to say exactly
//! how): one thread on the measuring CPU holds all of them, each a
//! `tickwire_client::Client` as an application would use it. Message *i*
//! is due at `t0 + i / rate` ([`publish`]'s open-loop schedule); publisher
//! `i % P` publishes it on its own topic with `Client::publish`. On every
//! turn of the loop (while waiting for the next send time, and after every
//! [`CATCH_UP_BATCH`](crate::base::openloop::CATCH_UP_BATCH) sends when
//! behind) the thread polls every subscriber once (`Client::poll`, up to
//! 64 messages each; over TCP, one `epoll_wait(0)` over the subscribers'
//! sockets first, and only the readable ones), and every 16 turns one
//! publisher (its heartbeat and replies). A delivery's latency is its
//! arrival in the subscriber's callback minus the intended send time
//! carried in its first 16 bytes.
//!
//! In request mode (`Harness::set_request`, `lab request`) publisher
//! `i % P` sends message *i* as a request (`Client::send_request`); the
//! subscriber of its topic answers it on the turn it polls it, with the
//! request's own bytes (`Client::reply`); the sample is the reply's
//! arrival at the requester minus the request's intended send time: a
//! whole round trip. Every requester is polled on every turn (over TCP,
//! those the epoll finds readable).

use super::host::HostReport;
use crate::base::openloop::{publish, read_pauses, write_pauses, Offer, PauseRecorder, Published, Samples, Split};
use crate::modes::oneway::topic;
use crate::{Cpus, LabError, WorkerProcess};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};
use tickwire_shm::os::monotonic_ns;
use tickwire_wire::stamp;

/// The sequence number of the set-up probes (never counted).
const PROBE: u64 = u64::MAX - 1;
/// How long set-up and the end of a round may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a round waits for the deliveries still on their way.
const DRAIN: Duration = Duration::from_secs(2);

/// The sessions.
pub(crate) struct Harness {
    pubs: Vec<Client>,
    subs: Vec<Client>,
    topics: Vec<String>,
    /// TCP: the subscribers' sockets in one (level-triggered) epoll, so a
    /// turn costs one `epoll_wait` instead of a `read` per subscriber.
    ready: Option<Ready>,
    /// Every subscriber's index (shared memory: all are polled each turn).
    all: Vec<usize>,
    /// Deliveries per message.
    pub(crate) fan: u64,
    /// Requests and replies instead of publishes.
    request: bool,
    /// Requests polled and not yet answered: (inbox, payload).
    answers: Vec<(String, Vec<u8>)>,
}

/// What one router round gave.
pub(crate) struct RoundResult {
    /// What the publishers sent.
    pub(crate) published: Published,
    /// Deliveries, both distributions, both sides' pauses.
    pub(crate) split: Split,
    /// Discards announced to the subscribers (Solace's discard indication).
    pub(crate) discarded: u64,
    /// The router's view after the round.
    pub(crate) host: HostReport,
    /// The clients' system calls in the round.
    pub(crate) clients: ClientIo,
}

/// The system calls the harness's clients made: their TCP links' own
/// counts of reads and writes, and the harness's `epoll_wait`s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientIo {
    /// Reads of the clients' sockets.
    pub reads: u64,
    /// Writes to them.
    pub writes: u64,
    /// The harness's `epoll_wait`s over its subscribers.
    pub polls: u64,
}

impl ClientIo {
    fn of(h: &Harness) -> Self {
        let mut io = ClientIo { polls: h.ready.as_ref().map_or(0, |r| r.polls), ..Self::default() };
        for s in h.pubs.iter().chain(&h.subs).filter_map(Client::link_stats) {
            io.reads += s.reads;
            io.writes += s.writes;
        }
        io
    }

    pub(crate) fn add(&mut self, o: Self) {
        (self.reads, self.writes, self.polls) = (self.reads + o.reads, self.writes + o.writes, self.polls + o.polls);
    }

    fn since(self, before: Self) -> Self {
        Self { reads: self.reads - before.reads, writes: self.writes - before.writes, polls: self.polls - before.polls }
    }
}

fn client_err(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Worker(format!("{what}: {e}"))
}

impl Harness {
    /// Connects `publishers` publishers, each on its own 12-byte topic, and
    /// `subscribers` subscribers: one topic each (`fanout` false; as many
    /// as publishers), or all on `md/>`. Returns once every subscription
    /// carries messages.
    ///
    /// # Errors
    /// Bad counts, a router that does not accept the clients, or
    /// subscriptions that never carry the probes.
    pub(crate) fn connect(
        uri: &str,
        base: &ClientOptions,
        (publishers, subscribers): (usize, usize),
        fanout: bool,
    ) -> Result<Self, LabError> {
        Self::connect_at((&vec![uri; publishers], &vec![uri; subscribers]), base, fanout)
    }

    /// [`Harness::connect`], publisher `i` to the router at `uris.0[i]`,
    /// subscriber `j` to the one at `uris.1[j]` (`lab cluster`: clients
    /// spread over the routers of a cluster).
    ///
    /// # Errors
    /// As [`Harness::connect`].
    pub(crate) fn connect_at(
        (pub_uris, sub_uris): (&[&str], &[&str]),
        base: &ClientOptions,
        fanout: bool,
    ) -> Result<Self, LabError> {
        let (publishers, subscribers) = (pub_uris.len(), sub_uris.len());
        if publishers == 0 || subscribers == 0 || (!fanout && publishers != subscribers) {
            return Err(LabError::Usage(
                "lab router needs one subscriber per publisher (or --fanout, every subscriber on md/>)".into(),
            ));
        }
        let open = |uri: &str, name: String| {
            let opts = ClientOptions { name, ..base.clone() };
            Client::connect(uri, opts).map_err(|e| client_err(uri, e))
        };
        let topics: Vec<String> = (0..publishers).map(topic).collect();
        let pubs =
            pub_uris.iter().enumerate().map(|(i, u)| open(u, format!("lab-pub-{i}"))).collect::<Result<Vec<_>, _>>()?;
        let mut subs =
            sub_uris.iter().enumerate().map(|(i, u)| open(u, format!("lab-sub-{i}"))).collect::<Result<Vec<_>, _>>()?;
        for (i, s) in subs.iter_mut().enumerate() {
            let pattern = if fanout { "md/>" } else { topics[i].as_str() };
            s.subscribe(pattern).map_err(|e| client_err(pattern, e))?;
        }
        let fan = if fanout { subscribers as u64 } else { 1 };
        let mut h = Self {
            pubs,
            subs,
            topics,
            ready: None,
            all: (0..subscribers).collect(),
            fan,
            request: false,
            answers: Vec::new(),
        };
        for c in h.pubs.iter_mut().chain(h.subs.iter_mut()) {
            c.wait_connected(SETUP_TIMEOUT).map_err(|e| client_err("lab router client", e))?;
        }
        h.probe(fanout)?;
        if pub_uris[0].starts_with("tcp://") || pub_uris[0].starts_with("tls://") {
            h.ready = Some(Ready::of(&h.subs, &h.pubs)?);
        }
        Ok(h)
    }

    /// Publishes a probe on every topic until every subscriber has had one
    /// from each topic it wants: the router has taken every subscription.
    fn probe(&mut self, fanout: bool) -> Result<(), LabError> {
        let want = if fanout { self.pubs.len() } else { 1 };
        let mut seen: Vec<Vec<bool>> = vec![vec![false; self.pubs.len()]; self.subs.len()];
        let mut msg = vec![0u8; 16];
        let start = Instant::now();
        let mut last_sent: Option<Instant> = None;
        while seen.iter().any(|s| s.iter().filter(|&&b| b).count() < want) {
            if start.elapsed() > SETUP_TIMEOUT {
                return Err(LabError::Timeout("the router never delivered the set-up probes".into()));
            }
            if last_sent.map_or(true, |t| t.elapsed() > Duration::from_millis(20)) {
                for (i, p) in self.pubs.iter_mut().enumerate() {
                    // A probe's time field carries its publisher's index.
                    stamp::write(&mut msg, PROBE, i as u64);
                    let _ = p.publish(&self.topics[i], &msg);
                    p.poll(|_| {}, 16);
                }
                last_sent = Some(Instant::now());
            }
            for (s, seen) in self.subs.iter_mut().zip(&mut seen) {
                s.poll(
                    |e| {
                        if let ClientEvent::Message(d) = e {
                            if stamp::seq(d.payload) == Some(PROBE) {
                                let from = stamp::intended_ns(d.payload).unwrap_or(0) as usize;
                                if let Some(b) = seen.get_mut(from) {
                                    *b = true;
                                }
                            }
                        }
                    },
                    64,
                );
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    }

    /// One router round: wakes the router, publishes open loop at `rate`
    /// for `duration` from this thread pinned to `cpus.local`, waits for
    /// the deliveries still on their way, puts the router back to sleep
    /// and splits the two distributions over both sides' pauses.
    ///
    /// # Errors
    /// A client that fails, or a router that does not answer.
    pub(crate) fn round(
        &mut self,
        shape: (u64, usize, Duration),
        cpus: Cpus,
        router: &mut WorkerProcess,
        pauses: &Path,
    ) -> Result<RoundResult, LabError> {
        self.round_many(shape, cpus, &mut [router], pauses)
    }

    /// [`Harness::round`] through several routers (`lab cluster`): each
    /// woken, each put back to sleep; their pauses all count as the far
    /// side's, and the report is their sum.
    ///
    /// # Errors
    /// As [`Harness::round`].
    pub(crate) fn round_many(
        &mut self,
        (rate, size, duration): (u64, usize, Duration),
        cpus: Cpus,
        routers: &mut [&mut WorkerProcess],
        pauses: &Path,
    ) -> Result<RoundResult, LabError> {
        for router in routers.iter_mut() {
            router.write_line("wake")?;
        }
        pin_current_thread(cpus.local)?;
        let io = ClientIo::of(self);
        let expected = (rate as f64 * duration.as_secs_f64()) as u64 * self.fan;
        let mut samples = Samples::with_capacity(expected as usize + 1024);
        let mut recorder = PauseRecorder::new(monotonic_ns());
        let mut path = Routed { h: self, samples: &mut samples, n: 0, turn: 0, received: 0, discarded: 0 };
        let published = publish(rate, size, duration, &mut recorder, &mut path)?;
        let end = Instant::now();
        while path.received < published.sent * path.h.fan && end.elapsed() < DRAIN {
            recorder.tick(monotonic_ns());
            path.work()?;
        }
        let discarded = path.discarded;

        let clients = ClientIo::of(self).since(io);
        let (mut host, mut theirs) = (HostReport::default(), Vec::new());
        for router in routers.iter_mut() {
            router.write_line(&format!("sleep {}", pauses.display()))?;
            let r: HostReport = crate::base::worker::parse_report("router", &router.read_line()?)?;
            host.add(&r);
            theirs.extend(read_pauses(pauses)?);
        }
        write_pauses(pauses, &theirs)?;
        let split = samples.split_with_peer(recorder.into_pauses(), pauses)?;
        Ok(RoundResult { published, split, discarded, host, clients })
    }

    /// Requests and replies from the next round on (`true`), or
    /// publishes (`false`).
    pub(crate) fn set_request(&mut self, on: bool) {
        self.request = on;
    }

    /// Says goodbye to the router on every session.
    pub(crate) fn close(self) {
        for c in self.pubs.into_iter().chain(self.subs) {
            c.close();
        }
    }
}

/// What a requester's poll hands out: a reply is a sample (a publisher's
/// heartbeat is nothing); a failed request or a lost router ends the round.
fn requester_event(e: ClientEvent<'_>, samples: &mut Samples, received: &mut u64, gone: &mut Option<String>) {
    match e {
        ClientEvent::Reply { payload, .. } => {
            samples.arrived(payload);
            *received += 1;
        }
        ClientEvent::RequestFailed { why, .. } => *gone = Some(format!("a request failed: {why}")),
        ClientEvent::Disconnected { reason } => *gone = Some(reason.to_owned()),
        _ => {}
    }
}

/// How long a lab request waits for its reply (a round's drain is shorter).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One publisher's connection is polled every this many turns.
const PUBLISHER_EVERY: usize = 16;

/// The subscribers' TCP sockets in one epoll.
struct Ready {
    epoll: Epoll,
    events: Vec<EpollEvent>,
    ready: Vec<usize>,
    /// `epoll_wait` calls so far.
    polls: u64,
}

impl Ready {
    /// Every subscriber (index `i`) and publisher (index `subs.len() + p`):
    /// a publisher is read only when the router wrote to it (a heartbeat,
    /// a reply), not on a clock.
    fn of(subs: &[Client], pubs: &[Client]) -> Result<Self, LabError> {
        let err = |e: nix::Error| LabError::Worker(format!("epoll: {e}"));
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(err)?;
        for (i, s) in subs.iter().chain(pubs).enumerate() {
            let fd = s.as_fd().ok_or_else(|| LabError::Worker(format!("lab client {i} is not connected")))?;
            epoll.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, i as u64)).map_err(err)?;
        }
        let all = subs.len() + pubs.len();
        Ok(Self { epoll, events: vec![EpollEvent::empty(); all], ready: Vec::with_capacity(all), polls: 0 })
    }

    /// The subscribers with something to read: their socket is readable,
    /// or their last poll left frames in the client.
    #[inline]
    fn wait(&mut self, subs: &[Client], pubs: &[Client]) -> Result<&[usize], LabError> {
        self.polls += 1;
        let n = self
            .epoll
            .wait(&mut self.events, EpollTimeout::ZERO)
            .map_err(|e| LabError::Worker(format!("epoll: {e}")))?;
        self.ready.clear();
        self.ready.extend(self.events[..n].iter().map(|e| e.data() as usize));
        for (i, s) in subs.iter().chain(pubs).enumerate() {
            if s.has_buffered() && !self.ready.contains(&i) {
                self.ready.push(i);
            }
        }
        Ok(&self.ready)
    }
}

/// The harness's path for [`publish`]: offers through the publishers in
/// turn, and polls every subscriber on every turn.
struct Routed<'a> {
    h: &'a mut Harness,
    samples: &'a mut Samples,
    /// Messages taken so far (picks the publisher).
    n: usize,
    /// Turns so far (picks the publisher whose heartbeat is kept).
    turn: usize,
    received: u64,
    discarded: u64,
}

impl Offer for Routed<'_> {
    #[inline]
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        let i = self.n % self.h.pubs.len();
        let sent = match self.h.request {
            true => self.h.pubs[i].send_request(&self.h.topics[i], msg, REQUEST_TIMEOUT).map(|_| ()),
            false => self.h.pubs[i].publish(&self.h.topics[i], msg),
        };
        match sent {
            Ok(()) => {
                self.n += 1;
                Ok(true)
            }
            Err(PublishError::BackPressured) => Ok(false),
            Err(e) => Err(client_err(&format!("publisher {i}"), e)),
        }
    }

    #[inline]
    fn work(&mut self) -> Result<(), LabError> {
        let Routed { h, samples, received, discarded, turn, .. } = self;
        let mut gone: Option<String> = None;
        let ready = match &mut h.ready {
            Some(r) => r.wait(&h.subs, &h.pubs)?,
            None => &h.all,
        };
        let subs = h.subs.len();
        let answers = &mut h.answers;
        for &i in ready {
            if i >= subs {
                // A publisher the router wrote to (TCP): its heartbeat, or
                // its replies.
                h.pubs[i - subs].poll(|e| requester_event(e, samples, received, &mut gone), 64);
                continue;
            }
            h.subs[i].poll(
                |e| match e {
                    ClientEvent::Message(d) if stamp::seq(d.payload) != Some(PROBE) => {
                        samples.arrived(d.payload);
                        *received += 1;
                        *discarded += u64::from(d.discarded);
                    }
                    ClientEvent::Request(r) => {
                        *discarded += u64::from(r.discarded);
                        answers.push((r.inbox.to_owned(), r.payload.to_vec()));
                    }
                    ClientEvent::Disconnected { reason } => gone = Some(reason.to_owned()),
                    _ => {}
                },
                64,
            );
            // Answered at once, as a responder would.
            let mut k = 0;
            while k < answers.len() {
                match h.subs[i].reply(&answers[k].0, &answers[k].1) {
                    Ok(()) => k += 1,
                    Err(PublishError::BackPressured) => break,
                    Err(e) => return Err(client_err(&format!("responder {i}"), e)),
                }
            }
            // What the router had no room for goes on a later turn.
            answers.drain(..k);
        }
        if h.request && h.ready.is_none() {
            // Shared memory: every requester's replies, every turn.
            for p in &mut h.pubs {
                p.poll(|e| requester_event(e, samples, received, &mut gone), 64);
            }
        }
        // What their links hold for batching goes once its window has
        // passed (no system call before).
        for p in &mut h.pubs {
            p.flush_due();
        }
        // Over shared memory the publishers read nothing but their own
        // heartbeat and the odd reply: one is looked after every few turns
        // (over TCP, when readable, above).
        *turn += 1;
        // (In request mode every requester was polled above.)
        if h.ready.is_some() || h.request || *turn % PUBLISHER_EVERY != 0 {
            return gone.map_or(Ok(()), |why| Err(LabError::Worker(format!("a lab client lost the router: {why}"))));
        }
        let p = (*turn / PUBLISHER_EVERY) % h.pubs.len();
        h.pubs[p].poll(
            |e| {
                if let ClientEvent::Disconnected { reason } = e {
                    gone = Some(reason.to_owned())
                }
            },
            16,
        );
        match gone {
            Some(why) => Err(LabError::Worker(format!("a lab client lost the router: {why}"))),
            None => Ok(()),
        }
    }
}
