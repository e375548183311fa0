//! What a client's calls return and its poll hands out: errors
//! ([`ClientError`], [`PublishError`]), deliveries ([`Delivery`]) and
//! events ([`ClientEvent`]).

use std::time::Duration;
use tickwire_topic::TopicError;
use tickwire_wire::client::{flags, RejectCode};
use tickwire_wire::headers::Headers;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Not `ipc`, `tcp://HOST:PORT` or `tls://HOST:PORT`.
    #[error("router URI {0:?}: expected ipc, tcp://HOST:PORT or tls://HOST:PORT")]
    Uri(String),
    /// The router's end refused this client for good ([`crate::Client::refused`]).
    #[error("{uri} refused this client: {why}")]
    Refused {
        /// Where.
        uri: String,
        /// Why.
        why: String,
    },
    /// `tls://` without a usable [`crate::ClientOptions::tls_ca`].
    #[error("tls: {0}")]
    Tls(String),
    /// A pattern broke the topic rules.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The shared-memory directory could not be used.
    #[error(transparent)]
    Shm(#[from] tickwire_shm::ShmError),
    /// `wait_connected` ran out of time.
    #[error("not connected to {uri} within {waited:?}{last}")]
    Timeout {
        /// Where.
        uri: String,
        /// How long.
        waited: Duration,
        /// The last connection error, if any.
        last: String,
    },
}

/// Why a publish was refused (nothing was sent; worth retrying unless said).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// Not connected to a router (yet, or any more).
    #[error("not connected to a router")]
    NotConnected,
    /// No room now; poll and try again.
    #[error("back-pressured: the router has not read what came before")]
    BackPressured,
    /// The topic breaks the rules (not worth retrying).
    #[error(transparent)]
    BadTopic(#[from] TopicError),
    /// This many guaranteed publishes await acknowledgement
    /// (`guaranteed_window`); poll and try again.
    #[error("{0} guaranteed publishes await the router's acknowledgement (the window is full)")]
    WindowFull(usize),
    /// [`crate::Client::reply`] on a topic that is not an inbox (the reply
    /// would reach that topic's subscribers): not sent.
    #[error("{0:?} is not an inbox: a reply goes on the inbox its request came with")]
    NotAnInbox(String),
    /// A header name or value that would break the header block
    /// ([`crate::Client::publish_with_headers`]; not worth retrying).
    #[error(transparent)]
    BadHeaders(#[from] tickwire_wire::headers::HeaderError),
    /// [`crate::Client::publish_with_headers`] on a guaranteed topic
    /// ([`crate::ClientOptions::guaranteed_topics`]): the journal keeps no
    /// headers. Not sent.
    #[error("{0}: a guaranteed publish cannot carry headers")]
    GuaranteedHeaders(String),
    /// The frame (header, topic and payload) is over the router's
    /// `max_frame` (told in WELCOME; before it, [`crate::ClientOptions::max_frame`]):
    /// nothing was sent, and it never will be.
    #[error("message of {size} bytes (header, topic and payload) is over the router's limit of {limit} bytes ([router.limits] max_frame): not sent")]
    TooLarge {
        /// The frame's bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// A message the router delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its payload (after its headers, if any).
    pub payload: &'a [u8],
    /// Its headers, if its publisher gave any
    /// ([`crate::Client::publish_with_headers`], a NATS client's `HPUB`).
    pub headers: Option<Headers<'a>>,
    /// [`flags::CACHED`], [`flags::GUARANTEED`], [`flags::HEADERS`].
    pub flags: u8,
    /// Messages for this client the router dropped just before this one
    /// (its queue was full): Solace's discard indication.
    pub discarded: u32,
    /// This client's delivery sequence (discarded messages took numbers
    /// too); for a guaranteed delivery, the journal's sequence (what
    /// [`crate::Client::ack`] takes).
    pub sequence: u64,
    /// A guaranteed delivery's durable subscription.
    pub subscription: Option<u32>,
    /// A guaranteed delivery's delivery count (1 the first time).
    pub deliveries: u32,
}

impl Delivery<'_> {
    /// Whether it is a guaranteed delivery of a durable subscription (to
    /// acknowledge with [`crate::Client::ack`]).
    pub fn is_guaranteed(&self) -> bool {
        self.flags & flags::GUARANTEED != 0
    }
    /// Whether it may have been delivered before (a redelivery).
    pub fn is_redelivered(&self) -> bool {
        self.flags & flags::REDELIVERED != 0
    }
    /// Whether it came from the last-value cache.
    pub fn is_cached(&self) -> bool {
        self.flags & flags::CACHED != 0
    }
}

/// A request the router delivered to this client, a responder: answer it
/// with [`crate::Client::reply`] on its `inbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The topic it was sent on.
    pub topic: &'a str,
    /// Its payload (after its headers, if any).
    pub payload: &'a [u8],
    /// Its headers, if its requester gave any (a NATS client's `HPUB`).
    pub headers: Option<Headers<'a>>,
    /// Where the reply goes (the requester's inbox, made by the router).
    pub inbox: &'a str,
    /// Messages for this client the router dropped just before this one.
    pub discarded: u32,
}

/// Why a request got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No subscription wanted its topic: nobody will answer (the router
    /// says so at once).
    #[error("no responders: no subscription wants the request's topic")]
    NoResponders,
    /// No reply came within its timeout.
    #[error("no reply within the request's timeout")]
    TimedOut,
    /// The connection to the router was lost before the reply (its inbox
    /// went with the session).
    #[error("the connection to the router was lost before the reply")]
    Disconnected,
    /// The router or this client refused it: a topic breaking the rules
    /// (`BadTopic`), over `max_frame` (`TooLarge`), not allowed
    /// (`Forbidden`).
    #[error("the request was refused ({0:?})")]
    Refused(RejectCode),
}

/// What [`crate::Client::poll`] hands its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEvent<'a> {
    /// The router accepted this client (after every start and reconnection;
    /// subscriptions were sent again).
    Connected {
        /// The router's name.
        router: &'a str,
        /// This client's id at the router.
        client_id: u32,
    },
    /// A message.
    Message(Delivery<'a>),
    /// A request for this client to answer ([`crate::Client::reply`]).
    Request(Request<'a>),
    /// The reply to request `request` ([`crate::Client::send_request`]).
    Reply {
        /// The request's id.
        request: u64,
        /// The reply's payload (after its headers, if any).
        payload: &'a [u8],
        /// Its headers, if its responder gave any (a NATS client's).
        headers: Option<Headers<'a>>,
    },
    /// Request `request` will get no (more) replies.
    RequestFailed {
        /// The request's id.
        request: u64,
        /// Why.
        why: RequestError,
    },
    /// The router refused a request; the session goes on.
    Rejected {
        /// Why, as a code.
        code: RejectCode,
        /// The subscription id or publish sequence refused.
        request: u64,
        /// Why, for people.
        reason: &'a str,
    },
    /// Messages a durable subscription will never receive (retention
    /// removed them before it read them): journal sequences `from..=to`.
    Lost {
        /// The durable subscription.
        subscription: u32,
        /// First sequence lost.
        from: u64,
        /// Last sequence lost.
        to: u64,
    },
    /// Direct publishes numbered `from..=to` ([`crate::Client::published`])
    /// went on a TCP connection that was lost before the router confirmed
    /// reading them: some or all of them may have reached no subscriber.
    /// Handed after [`ClientEvent::Disconnected`]. The router confirms
    /// in a heartbeat, about one `limits.heartbeat_interval` after a
    /// publish, and a router fallen silent is given up after two more:
    /// this covers up to about three intervals of publishing. A router
    /// with `heartbeat_interval = "0s"` confirms nothing, so every direct
    /// publish of the connection is named. (Guaranteed publishes are sent
    /// again until acknowledged, as always.) Over shared memory what the
    /// router had not read is not known, and nothing is reported.
    PublishGap {
        /// The first publish number not confirmed.
        from: u64,
        /// The last publish number sent on the lost connection.
        to: u64,
    },
    /// The router went away or closed the session; the client reconnects.
    Disconnected {
        /// Why.
        reason: &'a str,
    },
}
