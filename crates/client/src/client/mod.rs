//! [`Client`]: connect, publish, subscribe, poll, reconnect.

mod claim;
mod group;
mod request;
mod session;

use crate::conn::{Conn, SendError};
pub use crate::event::{ClientError, ClientEvent, Delivery, PublishError, Request, RequestError};
use crate::guaranteed::Outbox;
pub use crate::options::{ClientOptions, RouterUri};
pub use claim::ClientClaim;
pub use request::Gather;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tickwire_shm::Context;
use tickwire_topic::{check_topic, Pattern};
use tickwire_transport::link::LinkStats;
use tickwire_wire::client::{flags, ClientKind, ClientRepr, HEADER_LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// No connection; try at `next_attempt`.
    Waiting,
    /// Connection made, HELLO not sent (shared memory: router not attached).
    Opening,
    /// HELLO sent, WELCOME awaited.
    Greeting,
    /// WELCOME received.
    Connected,
}

/// A connection to a router that survives the router's restarts.
pub struct Client {
    /// The router connected to (or tried next).
    uri: RouterUri,
    /// A group's routers (`uri` among them), in an order of this client's
    /// own (shuffled at start), tried in turn after each lost connection;
    /// empty for one router. Routers its routers tell of join it
    /// ([`ClientOptions::discover_routers`]).
    group: Vec<RouterUri>,
    /// Routers learned from WELCOMEs (at most `group::DISCOVERED_MAX`):
    /// one that refuses this client is forgotten, not the end of it.
    learned: Vec<RouterUri>,
    /// A learned router that refused this client, left out of `group` at
    /// the next router's turn.
    forget: Option<RouterUri>,
    pub(crate) opts: ClientOptions,
    ctx: Option<Context>,
    tls: Option<std::sync::Arc<tickwire_transport::tls::ClientConfig>>,
    pub(crate) conn: Option<Conn>,
    pub(crate) state: State,
    next_attempt: Instant,
    /// When HELLO went on this connection.
    greeted_at: Instant,
    last_error: String,
    /// Subscriptions by id: pattern, SUBSCRIBE flags and body (a durable's name).
    subscriptions: BTreeMap<u32, (String, u8, String)>,
    /// Guaranteed publishes awaiting acknowledgement.
    pub(crate) outbox: Outbox,
    /// [`ClientOptions::guaranteed_topics`], parsed.
    guaranteed_topics: Vec<Pattern>,
    next_subscription: u32,
    next_sequence: u64,
    /// One past the highest publish number the router said it read on
    /// this connection (its heartbeats' receipts).
    receipt: u64,
    /// Publish numbers sent on a lost connection after its last receipt,
    /// for [`ClientEvent::PublishGap`].
    unconfirmed: Option<(u64, u64)>,
    router_name: String,
    client_id: u32,
    /// Sessions in a row that ended before WELCOME, or that the router
    /// closed for a limit: each doubles the wait before the next attempt.
    refusals: u32,
    /// The router's `max_frame`, from WELCOME (0: not said yet).
    pub(crate) router_max_frame: usize,
    pending: Option<String>,
    /// Why the router's end refused this client for good (TLS); no more
    /// connection attempts once set.
    refused: Option<String>,
    /// Requests awaiting their replies.
    pub(crate) requests: request::Outstanding,
}

/// The longest [`Client::close`] waits for what was published to leave.
const CLOSE_DRAIN: Duration = Duration::from_secs(5);

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("uri", &self.uri).field("state", &self.state).finish()
    }
}

/// A client dropped without [`Client::close`] still writes what batching
/// held (one non-blocking attempt): messages published before the drop
/// are not lost to the batching window.
impl Drop for Client {
    fn drop(&mut self) {
        if self.state == State::Connected {
            let _ = self.flush();
        }
    }
}

impl Client {
    /// Starts connecting to the router at `uri` (`ipc`, `tcp://HOST:PORT`
    /// or `tls://HOST:PORT`), or to one of several routers (a cluster's,
    /// or a high-availability group's) given as a comma-separated list of
    /// `tcp://` (or of `tls://`) URIs. The list is shuffled, as NATS
    /// clients do, so that many clients spread over its routers and the
    /// clients of one that goes away spread over the others; after each
    /// lost connection the next in this order is tried, so guaranteed
    /// publishes and durable subscriptions find the leader (a follower
    /// closes their session with `NotLeader`). A router of a cluster tells
    /// its clients where the cluster's other routers take clients, and they
    /// join the list ([`ClientOptions::discover_routers`]): one router is
    /// enough to start. Returns at once:
    /// [`Client::poll`] (or [`Client::wait_connected`]) completes the
    /// connection, now or when the router comes.
    ///
    /// # Errors
    /// [`ClientError::Uri`] for a bad URI, [`ClientError::Shm`] if the
    /// directory cannot be used, [`ClientError::Tls`] for `tls://` without
    /// a readable `tls_ca`, or a `tls_cert` without its `tls_key` (or one
    /// unreadable, or a key others may read); [`ClientError::Topic`] for a
    /// `guaranteed_topics` pattern that breaks the topic rules.
    pub fn connect(uri: &str, opts: ClientOptions) -> Result<Self, ClientError> {
        let group = group::parse(uri)?;
        let uri: RouterUri = match group.first() {
            Some(u) => u.clone(),
            None => uri.parse()?,
        };
        let guaranteed_topics = opts.guaranteed_topics.iter().map(|p| Pattern::parse(p)).collect::<Result<_, _>>()?;
        let ctx = match uri {
            RouterUri::Ipc => Some(match Context::new(&opts.dir) {
                Ok(c) => c,
                // The router's directory is another user's (a deployment
                // with a group): the logs cross its socket, and this
                // client's counters live in its own user's directory.
                Err(tickwire_shm::ShmError::DirNotOwn { .. }) => Context::new(tickwire_shm::default_dir())?,
                Err(e) => return Err(e.into()),
            }),
            _ => None,
        };
        let identity =
            match (&opts.tls_cert, &opts.tls_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                (None, None) => None,
                _ => return Err(ClientError::Tls(
                    "a client certificate needs its key and a key its certificate (ClientOptions::tls_cert, tls_key)"
                        .into(),
                )),
            };
        let tls = match (&uri, &opts.tls_ca) {
            (RouterUri::Tls { .. }, Some(ca)) => Some(
                tickwire_transport::tls::client_config(ca, identity).map_err(|e| ClientError::Tls(e.to_string()))?,
            ),
            (RouterUri::Tls { .. }, None) => {
                return Err(ClientError::Tls(format!("{uri} needs the certificate authority (ClientOptions::tls_ca)")))
            }
            _ => None,
        };
        let mut c = Self {
            uri,
            group,
            learned: Vec::new(),
            forget: None,
            opts,
            ctx,
            tls,
            conn: None,
            state: State::Waiting,
            next_attempt: Instant::now(),
            greeted_at: Instant::now(),
            last_error: String::new(),
            subscriptions: BTreeMap::new(),
            next_subscription: 1,
            next_sequence: 0,
            receipt: 0,
            unconfirmed: None,
            router_name: String::new(),
            router_max_frame: 0,
            refusals: 0,
            client_id: 0,
            pending: None,
            refused: None,
            outbox: Outbox::new(),
            guaranteed_topics,
            requests: request::Outstanding::new(),
        };
        c.advance();
        Ok(c)
    }

    /// Whether the router has accepted this client.
    pub fn is_connected(&self) -> bool {
        self.state == State::Connected
    }

    /// This client's id at the router (its row in `tickwire stat`), while
    /// connected; it changes when the client reconnects.
    pub fn client_id(&self) -> Option<u32> {
        self.is_connected().then_some(self.client_id)
    }

    /// Why the router's end refused this client for good (a TLS
    /// certificate that does not verify, a router that does not speak
    /// TLS, no user or a wrong password, a user removed); `None` while
    /// connecting again may still work. Once refused, the
    /// client stops trying.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Why the last connection attempt failed (empty if none did).
    pub fn last_error(&self) -> &str {
        &self.last_error
    }

    /// The TCP connection's socket, for an application that waits on it
    /// in its own `epoll` (level-triggered). [`Client::poll`] hands over at
    /// most `limit` frames a call and may leave more already read from the
    /// socket: while [`Client::has_buffered`] says so, poll again before
    /// waiting on the socket. `None` over shared memory and while not
    /// connected; it changes when the client reconnects.
    pub fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.conn {
            Some(c) if self.state == State::Connected => c.as_fd(),
            _ => None,
        }
    }

    /// Whether the last [`Client::poll`] stopped at its limit with frames
    /// that may already wait in the client (read from the socket, or held
    /// by the TLS layer): the socket will not become readable for them.
    /// Poll again before waiting on [`Client::as_fd`].
    pub fn has_buffered(&self) -> bool {
        self.conn.as_ref().is_some_and(Conn::has_buffered)
    }

    /// Whether nothing this client wrote waits in it for the socket (TCP;
    /// over shared memory a publish is in the log at once).
    pub fn is_flushed(&self) -> bool {
        self.conn.as_ref().map_or(true, Conn::is_flushed)
    }

    /// Where the router is (of a group: the one connected to, or tried
    /// next).
    pub fn uri(&self) -> &RouterUri {
        &self.uri
    }

    /// A group's routers, in the order this client tries them (the list
    /// given to [`Client::connect`], shuffled, then the routers a
    /// cluster's router told of; empty for one router told of none).
    pub fn group(&self) -> &[RouterUri] {
        &self.group
    }

    /// Polls until the router accepts this client.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] if it has not by `timeout`.
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), ClientError> {
        // A timeout past the clock's range waits for ever.
        let until = Instant::now().checked_add(timeout);
        while !self.is_connected() {
            if let Some(why) = &self.refused {
                return Err(ClientError::Refused { uri: self.uri.to_string(), why: why.clone() });
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                let last =
                    if self.last_error.is_empty() { String::new() } else { format!(" (last: {})", self.last_error) };
                return Err(ClientError::Timeout { uri: self.uri.to_string(), waited: timeout, last });
            }
            // One frame at a time, so no delivery after WELCOME is consumed
            // here; a publish gap is kept for the application's next poll.
            let mut gap = None;
            let polled = self.poll(
                |e| {
                    if let ClientEvent::PublishGap { from, to } = e {
                        gap = Some((from, to));
                    }
                },
                1,
            );
            if gap.is_some() {
                self.unconfirmed = gap;
            }
            if polled == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// Subscribes to `pattern`; returns its id. Sent now if connected, and
    /// again after every reconnection.
    ///
    /// # Errors
    /// [`ClientError::Topic`] for a pattern that breaks the topic rules.
    pub fn subscribe(&mut self, pattern: &str) -> Result<u32, ClientError> {
        self.subscribe_with(pattern, 0)
    }

    /// [`Client::subscribe`], first receiving the router's last-value cache:
    /// the newest message of every cached topic `pattern` matches, each
    /// flagged ([`Delivery::is_cached`]), before any live message, with no
    /// gap and no duplicate between them. (Again after every reconnection.)
    ///
    /// # Errors
    /// As [`Client::subscribe`]; a router without a cache refuses the
    /// subscription with a [`ClientEvent::Rejected`].
    pub fn subscribe_cached(&mut self, pattern: &str) -> Result<u32, ClientError> {
        self.subscribe_with(pattern, flags::CACHED)
    }

    /// A durable subscription named `name` to `pattern`: the router keeps
    /// its place in its journal while this client is away (or the router
    /// restarts), delivers in order every guaranteed message published on
    /// a matching topic (flagged [`Delivery::is_guaranteed`]), and sends
    /// again what [`Client::ack`] did not acknowledge, flagged
    /// [`Delivery::is_redelivered`]. (Bound again after every reconnection.)
    ///
    /// # Errors
    /// As [`Client::subscribe`]; a router without a journal, or with the
    /// name bound elsewhere, refuses it with a [`ClientEvent::Rejected`].
    pub fn subscribe_durable(&mut self, pattern: &str, name: &str) -> Result<u32, ClientError> {
        self.subscribe_with_body(pattern, flags::DURABLE, name)
    }

    /// Consumes durable queue `name`, fed by `pattern` (made by the first
    /// consumer, from the journal's end): its guaranteed messages are
    /// shared among its consumers, each delivered to one at a time
    /// (flagged [`Delivery::is_guaranteed`]) until that one acknowledges it
    /// with [`Client::ack`] (which, for a queue, names that one delivery).
    /// What a consumer does not acknowledge (it leaves, dies, or lets the
    /// router's acknowledgement timeout pass) goes to another, flagged
    /// [`Delivery::is_redelivered`]. (Bound again after every
    /// reconnection.)
    ///
    /// # Errors
    /// As [`Client::subscribe`]; a router without a journal, a name that
    /// is a durable subscription, or a pattern other than the queue's is
    /// refused with a [`ClientEvent::Rejected`].
    pub fn subscribe_durable_queue(&mut self, pattern: &str, name: &str) -> Result<u32, ClientError> {
        self.subscribe_with_body(pattern, flags::DURABLE | flags::QUEUE, name)
    }

    /// Joins queue group `group` on `pattern`: each message (and request)
    /// the pattern matches goes to one member of the group, round-robin
    /// among those keeping up, while plain subscribers still get every
    /// one. A member that leaves or dies gets no more at once; what was
    /// already handed to it goes with it, like any direct message.
    /// (Joined again after every reconnection.)
    ///
    /// # Errors
    /// As [`Client::subscribe`]; the router refuses a group name that is
    /// empty, over 64 bytes or holds whitespace, and, with more than one
    /// routing agent, queue groups at all, with a [`ClientEvent::Rejected`].
    pub fn subscribe_queue(&mut self, pattern: &str, group: &str) -> Result<u32, ClientError> {
        self.subscribe_with_body(pattern, flags::QUEUE, group)
    }

    fn subscribe_with(&mut self, pattern: &str, flags: u8) -> Result<u32, ClientError> {
        self.subscribe_with_body(pattern, flags, "")
    }

    fn subscribe_with_body(&mut self, pattern: &str, flags: u8, body: &str) -> Result<u32, ClientError> {
        Pattern::parse(pattern)?;
        let id = self.next_subscription;
        self.next_subscription += 1;
        self.subscriptions.insert(id, (pattern.to_owned(), flags, body.to_owned()));
        if matches!(self.state, State::Greeting | State::Connected) {
            self.send_subscribe(id);
        }
        Ok(id)
    }

    /// Drops subscription `id` (unknown ids are ignored).
    pub fn unsubscribe(&mut self, id: u32) {
        if self.subscriptions.remove(&id).is_some() && matches!(self.state, State::Greeting | State::Connected) {
            self.send_control(&ClientRepr { value: id, ..ClientRepr::new(ClientKind::Unsubscribe) });
        }
    }

    fn send_subscribe(&mut self, id: u32) {
        let Some((p, flags, body)) = self.subscriptions.get(&id).cloned() else { return };
        let f =
            ClientRepr { value: id, flags, topic: &p, body: body.as_bytes(), ..ClientRepr::new(ClientKind::Subscribe) };
        self.send_control(&f);
    }

    /// Sends a control frame, waiting briefly for room; a connection that
    /// stays full or breaks is dropped (and re-made, subscriptions and all).
    pub(crate) fn send_control(&mut self, repr: &ClientRepr<'_>) {
        let Some(conn) = &mut self.conn else { return };
        let until = Instant::now() + Duration::from_secs(1);
        loop {
            // Control frames are not held for batching.
            match conn.send(repr).and_then(|()| conn.flush()) {
                Ok(()) => return,
                Err(SendError::Full) if Instant::now() < until => std::thread::yield_now(),
                Err(SendError::Full) => return self.lose("the router does not read this client's frames".into()),
                // (Only reads are refused; a send fails as broken.)
                Err(SendError::Broken(why) | SendError::Refused(why)) => return self.lose(why),
            }
        }
    }

    /// The number the next direct publish gets: direct publishes
    /// (replies included; requests and guaranteed publishes are numbered
    /// apart) are numbered from 0 in the order they were accepted, across
    /// reconnections, as [`ClientEvent::PublishGap`] names them (a claim
    /// dropped without its commit uses up its number).
    pub fn published(&self) -> u64 {
        self.next_sequence
    }

    /// Publishes `payload` on `topic` (guaranteed if `topic` matches one of
    /// [`ClientOptions::guaranteed_topics`]).
    ///
    /// Over TCP a message on an idle link is written at once; messages
    /// published close behind a write wait, by [`ClientOptions::batching`],
    /// and leave together with the next `publish` or [`Client::poll`] once
    /// its window has passed, or at once with [`Client::flush`]. What the
    /// socket does not take waits in the client (up to
    /// [`ClientOptions::tcp_write_limit`]): a publisher that stops
    /// publishing calls [`Client::flush`], then polls until
    /// [`Client::is_flushed`] says it all went.
    ///
    /// # Errors
    /// [`PublishError`]: nothing was sent.
    #[inline]
    pub fn publish(&mut self, topic: &str, payload: &[u8]) -> Result<(), PublishError> {
        if !self.guaranteed_topics.is_empty() && self.guaranteed_topics.iter().any(|p| p.matches(topic)) {
            return self.publish_guaranteed(topic, payload).map(|_| ());
        }
        self.send_publish(topic, payload, 0, None)
    }

    /// Publishes `payload` on `topic` with `headers` before it, `Name:
    /// value` pairs in NATS's format ([`tickwire_wire::headers`]): a
    /// subscriber gets them as [`Delivery::headers`](crate::Delivery),
    /// a NATS client as `HMSG`. Direct delivery only: the journal keeps
    /// no headers.
    ///
    /// # Errors
    /// As [`Client::publish`]; [`PublishError::BadHeaders`] for a name or
    /// value that would break the block; [`PublishError::GuaranteedHeaders`]
    /// on a topic of [`ClientOptions::guaranteed_topics`].
    pub fn publish_with_headers(
        &mut self,
        topic: &str,
        headers: &[(&str, &str)],
        payload: &[u8],
    ) -> Result<(), PublishError> {
        if self.guaranteed_topics.iter().any(|p| p.matches(topic)) {
            return Err(PublishError::GuaranteedHeaders(topic.to_owned()));
        }
        let mut body = Vec::with_capacity(payload.len() + 64);
        tickwire_wire::headers::put(&mut body, headers, payload)?;
        self.send_publish(topic, &body, flags::HEADERS, None)
    }

    /// Sends one PUBLISH flagged `flags`, its sequence `sequence` (a
    /// request's correlation id) or the next publish number.
    #[inline]
    fn send_publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        flags: u8,
        sequence: Option<u64>,
    ) -> Result<(), PublishError> {
        check_topic(topic)?;
        self.check_size(topic, payload.len())?;
        if self.state != State::Connected {
            return Err(PublishError::NotConnected);
        }
        let Some(conn) = &mut self.conn else { return Err(PublishError::NotConnected) };
        let numbered = sequence.is_none();
        let sequence = sequence.unwrap_or(self.next_sequence);
        match conn.send(&ClientRepr { sequence, topic, body: payload, flags, ..ClientRepr::new(ClientKind::Publish) }) {
            Ok(()) => {
                self.next_sequence += u64::from(numbered);
                Ok(())
            }
            Err(SendError::Full) => Err(PublishError::BackPressured),
            Err(SendError::Broken(why) | SendError::Refused(why)) => {
                self.lose(why);
                Err(PublishError::NotConnected)
            }
        }
    }

    /// Writes every message held for batching now (TCP; shared memory
    /// holds nothing back). A message that does not fit the socket still
    /// waits, for the next `poll`.
    ///
    /// # Errors
    /// [`PublishError::NotConnected`]: the connection broke (it is made
    /// again by `poll`).
    pub fn flush(&mut self) -> Result<(), PublishError> {
        let Some(conn) = &mut self.conn else { return Ok(()) };
        match conn.flush() {
            Ok(()) => Ok(()),
            Err(SendError::Full) => Ok(()),
            Err(SendError::Broken(why) | SendError::Refused(why)) => {
                self.lose(why);
                Err(PublishError::NotConnected)
            }
        }
    }

    /// Writes what batching holds if its window has passed (no system call
    /// otherwise): for a duty cycle that publishes on this client but does
    /// not [`Client::poll`] it every time. `poll` does this first.
    pub fn flush_due(&mut self) {
        if let Some(conn) = &mut self.conn {
            if let Err(SendError::Broken(why) | SendError::Refused(why)) = conn.flush_due() {
                self.lose(why);
            }
        }
    }

    /// What this connection's TCP link did: system calls (reads, writes),
    /// frames and bytes each way; `None` over shared memory.
    pub fn link_stats(&self) -> Option<LinkStats> {
        self.conn.as_ref().and_then(Conn::link_stats)
    }

    /// The largest frame the router takes: what it said in WELCOME, else
    /// (not connected yet) [`ClientOptions::max_frame`], the router's
    /// default too.
    pub fn max_frame(&self) -> usize {
        if self.router_max_frame > 0 {
            self.router_max_frame
        } else {
            self.opts.max_frame
        }
    }

    /// [`PublishError::TooLarge`] for a frame over [`Client::max_frame`]:
    /// the router would close the session on it.
    pub(crate) fn check_size(&self, topic: &str, payload: usize) -> Result<(), PublishError> {
        let size = HEADER_LEN + topic.len() + payload;
        let limit = self.max_frame();
        if size > limit {
            return Err(PublishError::TooLarge { size, limit });
        }
        Ok(())
    }

    /// Parks until the router may have written, for at most `max` (shared
    /// memory: on the log's futex, no CPU; TCP: a short sleep).
    pub fn park(&mut self, max: Duration) {
        // Nothing held for batching waits through the nap.
        let _ = self.flush();
        match &mut self.conn {
            Some(c) if self.state == State::Connected => c.park(max),
            _ => std::thread::sleep(max.min(self.opts.reconnect_interval)),
        }
    }

    /// Says goodbye to the router once what was published has left the
    /// client (TCP: up to 5 s while the router reads), and lets the
    /// connection go.
    pub fn close(mut self) {
        if self.state == State::Connected {
            self.send_control(&ClientRepr { body: b"closed by the application", ..ClientRepr::new(ClientKind::Close) });
            if let Some(c @ Conn::Tcp(_)) = &mut self.conn {
                // What was published goes before the connection closes:
                // the write buffer drains while the router reads, for up
                // to CLOSE_DRAIN.
                let end = Instant::now() + CLOSE_DRAIN;
                while !c.is_flushed() && Instant::now() < end {
                    if c.flush().is_err() || c.poll(|_| {}, 0).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
}
