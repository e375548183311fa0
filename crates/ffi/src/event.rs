//! What a poll hands the caller's callback: one [`tw_event`], tagged by
//! [`tw_event_kind`], its pointers valid only during the callback (they
//! point into the shared-memory log or the connection's buffer: zero
//! copy). Strings are not NUL-terminated: each has its length.

use std::ffi::{c_char, c_void};
use tickwire_client::{ClientEvent, RequestError};
use tickwire_driver::Event;

/// What an event is.
#[repr(C)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tw_event_kind {
    /// A message: `topic`, `payload` (a router client's may have
    /// `headers`), `sequence` (a channel's: its position; a router
    /// client's: its delivery sequence, a guaranteed one's journal
    /// sequence, to acknowledge with `subscription`), `discarded`.
    TW_EVENT_MESSAGE = 1,
    /// Messages lost for good: `sequence` to `to` (a channel's: positions;
    /// a durable subscription's: journal sequences, `subscription`).
    TW_EVENT_LOST = 2,
    /// A channel's publisher joined (`session`, `sequence` its position).
    TW_EVENT_JOINED = 3,
    /// A channel's publisher ended cleanly (`session`).
    TW_EVENT_ENDED = 4,
    /// A channel's publisher went away without ending (`session`).
    TW_EVENT_PUBLISHER_GONE = 5,
    /// A request for this client to answer: `topic`, `payload`, `inbox`
    /// (answer with `tw_client_reply`).
    TW_EVENT_REQUEST = 6,
    /// The reply (`payload`) to request `sequence`.
    TW_EVENT_REPLY = 7,
    /// Request `sequence` gets no reply: `code` is a `tw_request_failure`.
    TW_EVENT_REQUEST_FAILED = 8,
    /// The router refused request `sequence`: `code` (its reject code),
    /// `reason`.
    TW_EVENT_REJECTED = 9,
    /// Connected to the router (`reason`: its name; after every
    /// reconnection too).
    TW_EVENT_CONNECTED = 10,
    /// The connection to the router was lost (`reason`); it reconnects.
    TW_EVENT_DISCONNECTED = 11,
    /// Direct publishes numbered `sequence` to `to` (`tw_client_published`)
    /// went on a TCP connection lost before the router confirmed reading
    /// them: some or all may have reached no subscriber. Right after
    /// `TW_EVENT_DISCONNECTED`.
    TW_EVENT_PUBLISH_GAP = 12,
}

/// Why a request gets no reply (`tw_event.code` of
/// `TW_EVENT_REQUEST_FAILED`).
#[repr(C)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tw_request_failure {
    /// No subscription wants its topic.
    TW_REQUEST_NO_RESPONDERS = 1,
    /// No reply within its timeout.
    TW_REQUEST_TIMED_OUT = 2,
    /// The connection was lost before the reply.
    TW_REQUEST_DISCONNECTED = 3,
    /// Refused (a topic, a size, an ACL).
    TW_REQUEST_REFUSED = 4,
}

/// One event. Fields an event's kind does not name are zero or NULL.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct tw_event {
    /// What it is.
    pub kind: tw_event_kind,
    /// The topic (not NUL-terminated).
    pub topic: *const c_char,
    /// Its length.
    pub topic_len: usize,
    /// The payload.
    pub payload: *const u8,
    /// Its length.
    pub payload_len: usize,
    /// The header block (`NATS/1.0`, `Name: value` lines), if any.
    pub headers: *const u8,
    /// Its length (0: none).
    pub headers_len: usize,
    /// A request's inbox, to reply on (not NUL-terminated).
    pub inbox: *const c_char,
    /// Its length.
    pub inbox_len: usize,
    /// A reason or router name (not NUL-terminated).
    pub reason: *const c_char,
    /// Its length.
    pub reason_len: usize,
    /// A position, sequence or request id (see the kind).
    pub sequence: u64,
    /// The end of a loss.
    pub to: u64,
    /// Messages dropped for this client just before this one.
    pub discarded: u32,
    /// A guaranteed delivery's or a loss's durable subscription.
    pub subscription: u32,
    /// A guaranteed delivery's delivery count (1 the first time).
    pub deliveries: u32,
    /// A channel publisher's session id.
    pub session: u32,
    /// The message's frame flags (guaranteed, cached, redelivered, ...).
    pub flags: u32,
    /// A request failure or reject code.
    pub code: i32,
}

/// `tw_event.flags`: a guaranteed delivery (acknowledge it).
pub const TW_FLAG_GUARANTEED: u32 = 0x01;
/// `tw_event.flags`: from the router's last-value cache.
pub const TW_FLAG_CACHED: u32 = 0x02;
/// `tw_event.flags`: the message has headers (`headers`).
pub const TW_FLAG_HEADERS: u32 = 0x08;
/// `tw_event.flags`: may have been delivered before.
pub const TW_FLAG_REDELIVERED: u32 = 0x20;
/// `tw_event.flags`: a request.
pub const TW_FLAG_REQUEST: u32 = 0x40;
/// `tw_event.flags`: delivered to this client as a queue group's member.
pub const TW_FLAG_QUEUE: u32 = 0x80;

/// Called once per event, with the caller's `user` pointer.
#[allow(non_camel_case_types)]
pub type tw_handler = Option<extern "C" fn(user: *mut c_void, event: *const tw_event)>;

impl tw_event {
    fn of(kind: tw_event_kind) -> Self {
        Self {
            kind,
            topic: std::ptr::null(),
            topic_len: 0,
            payload: std::ptr::null(),
            payload_len: 0,
            headers: std::ptr::null(),
            headers_len: 0,
            inbox: std::ptr::null(),
            inbox_len: 0,
            reason: std::ptr::null(),
            reason_len: 0,
            sequence: 0,
            to: 0,
            discarded: 0,
            subscription: 0,
            deliveries: 0,
            session: 0,
            flags: 0,
            code: 0,
        }
    }

    fn topic(mut self, t: &str) -> Self {
        (self.topic, self.topic_len) = (t.as_ptr().cast(), t.len());
        self
    }

    fn payload(mut self, p: &[u8]) -> Self {
        (self.payload, self.payload_len) = (p.as_ptr(), p.len());
        self
    }

    fn reason(mut self, r: &str) -> Self {
        (self.reason, self.reason_len) = (r.as_ptr().cast(), r.len());
        self
    }

    fn headers(mut self, h: Option<tickwire_client::Headers<'_>>) -> Self {
        if let Some(h) = h {
            (self.headers, self.headers_len) = (h.block().as_ptr(), h.block().len());
        }
        self
    }

    /// A channel subscription's event.
    pub(crate) fn of_channel(e: &Event<'_>) -> Self {
        use tw_event_kind::*;
        match e {
            Event::Message(m) => {
                let mut v = Self::of(TW_EVENT_MESSAGE).topic(m.topic).payload(m.payload);
                (v.sequence, v.session) = (m.position, m.session_id);
                v
            }
            Event::Lost { session_id, from, to } => {
                Self { session: *session_id, sequence: *from, to: *to, ..Self::of(TW_EVENT_LOST) }
            }
            Event::Joined { session_id, position } => {
                Self { session: *session_id, sequence: *position, ..Self::of(TW_EVENT_JOINED) }
            }
            Event::Ended { session_id, position } => {
                Self { session: *session_id, sequence: *position, ..Self::of(TW_EVENT_ENDED) }
            }
            Event::PublisherGone { session_id, position, .. } => {
                Self { session: *session_id, sequence: *position, ..Self::of(TW_EVENT_PUBLISHER_GONE) }
            }
        }
    }

    /// A router client's event.
    pub(crate) fn of_client(e: &ClientEvent<'_>) -> Self {
        use tw_event_kind::*;
        match e {
            ClientEvent::Message(d) => {
                let mut v = Self::of(TW_EVENT_MESSAGE).topic(d.topic).payload(d.payload).headers(d.headers);
                (v.sequence, v.discarded, v.deliveries) = (d.sequence, d.discarded, d.deliveries);
                (v.subscription, v.flags) = (d.subscription.unwrap_or(0), u32::from(d.flags));
                v
            }
            ClientEvent::Request(r) => {
                let mut v = Self::of(TW_EVENT_REQUEST).topic(r.topic).payload(r.payload).headers(r.headers);
                (v.inbox, v.inbox_len, v.discarded) = (r.inbox.as_ptr().cast(), r.inbox.len(), r.discarded);
                v
            }
            ClientEvent::Reply { request, payload, headers } => {
                Self { sequence: *request, ..Self::of(TW_EVENT_REPLY).payload(payload).headers(*headers) }
            }
            ClientEvent::RequestFailed { request, why } => {
                let code = match why {
                    RequestError::NoResponders => tw_request_failure::TW_REQUEST_NO_RESPONDERS,
                    RequestError::TimedOut => tw_request_failure::TW_REQUEST_TIMED_OUT,
                    RequestError::Disconnected => tw_request_failure::TW_REQUEST_DISCONNECTED,
                    RequestError::Refused(_) => tw_request_failure::TW_REQUEST_REFUSED,
                };
                Self { sequence: *request, code: code as i32, ..Self::of(TW_EVENT_REQUEST_FAILED) }
            }
            ClientEvent::Rejected { code, request, reason } => {
                Self { sequence: *request, code: *code as i32, ..Self::of(TW_EVENT_REJECTED).reason(reason) }
            }
            ClientEvent::Lost { subscription, from, to } => {
                Self { subscription: *subscription, sequence: *from, to: *to, ..Self::of(TW_EVENT_LOST) }
            }
            ClientEvent::Connected { router, client_id } => {
                Self { session: *client_id, ..Self::of(TW_EVENT_CONNECTED).reason(router) }
            }
            ClientEvent::Disconnected { reason } => Self::of(TW_EVENT_DISCONNECTED).reason(reason),
            ClientEvent::PublishGap { from, to } => Self { sequence: *from, to: *to, ..Self::of(TW_EVENT_PUBLISH_GAP) },
        }
    }
}
