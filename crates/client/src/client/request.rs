//! Requests and replies ([`tickwire_wire::request`]): a request is a
//! PUBLISH flagged `REQUEST` whose sequence is its id here (the
//! correlation id); its replies come back on this client's inbox, which
//! the router makes, and are matched by that id, not by order. Many may be
//! outstanding at once. [`Client::poll`] hands out the replies
//! ([`ClientEvent::Reply`]) and the ends of requests that got none
//! ([`ClientEvent::RequestFailed`]: no responders, at once; a timeout; a
//! lost connection). [`Client::request`] and [`Client::request_many`] wait
//! for them.

use super::{Client, ClientEvent};
use crate::event::{PublishError, RequestError};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tickwire_wire::client::{flags, RejectCode};

/// Requests awaiting replies: each one's deadline, and whether it takes
/// more than one reply.
#[derive(Debug)]
pub(crate) struct Outstanding {
    /// The next request's id: a random start, so that a reply meant for
    /// an earlier session that reached this one matches nothing.
    next: u64,
    waiting: HashMap<u64, (Instant, bool)>,
    /// The earliest deadline among them (the clock is read only while
    /// some wait).
    earliest: Option<Instant>,
    /// Requests whose connection was lost, to report at the next poll.
    lost: Vec<u64>,
    /// Replies that matched no outstanding request (late, or not ours).
    pub(crate) stray: u64,
}

impl Outstanding {
    pub(crate) fn new() -> Self {
        let t = tickwire_shm::os::monotonic_ns();
        let mut x = t ^ u64::from(std::process::id()).rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15;
        x ^= x >> 31;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 29;
        Self { next: x >> 1, waiting: HashMap::new(), earliest: None, lost: Vec::new(), stray: 0 }
    }

    fn start(&mut self, deadline: Instant, many: bool) -> u64 {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.waiting.insert(id, (deadline, many));
        self.earliest = Some(self.earliest.map_or(deadline, |e| e.min(deadline)));
        id
    }

    /// Whether request `id` still waits for a reply.
    pub(crate) fn is_waiting(&self, id: u64) -> bool {
        self.waiting.contains_key(&id)
    }

    /// A reply to `id` came: a single request is answered.
    pub(crate) fn replied(&mut self, id: u64) {
        if let Some((_, false)) = self.waiting.get(&id) {
            self.waiting.remove(&id);
        }
    }

    /// Request `id` is over.
    pub(crate) fn end(&mut self, id: u64) {
        self.waiting.remove(&id);
    }

    /// The connection went, and every inbox with it.
    pub(crate) fn connection_lost(&mut self) {
        self.lost.extend(self.waiting.drain().map(|(id, _)| id));
        self.earliest = None;
    }

    /// Requests past their deadline at `now` and those whose connection
    /// was lost, taken out, with why.
    pub(crate) fn take_ended(&mut self, out: &mut Vec<(u64, RequestError)>) {
        out.extend(self.lost.drain(..).map(|id| (id, RequestError::Disconnected)));
        let Some(earliest) = self.earliest else { return };
        let now = Instant::now();
        if now < earliest {
            return;
        }
        self.earliest = None;
        let mut next: Option<Instant> = None;
        self.waiting.retain(|&id, &mut (deadline, _)| {
            if deadline <= now {
                out.push((id, RequestError::TimedOut));
                false
            } else {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
                true
            }
        });
        self.earliest = next;
    }

    /// Whether a poll has anything to report or watch.
    pub(crate) fn is_idle(&self) -> bool {
        self.earliest.is_none() && self.lost.is_empty()
    }
}

/// When [`Client::request_many`] stops gathering replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gather {
    /// At most this long after the request.
    pub within: Duration,
    /// Once this many replies came (`None`: no count).
    pub count: Option<usize>,
    /// Once no reply came for this long after the last one (`None`: no gap).
    pub quiet: Option<Duration>,
}

/// What a RejECT for an outstanding request means for it.
/// `timeout` from now; a timeout past the clock's range (a caller's
/// "for ever") is a century, not an overflow.
fn after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

pub(crate) fn refusal(code: RejectCode) -> RequestError {
    match code {
        RejectCode::NoResponders => RequestError::NoResponders,
        c => RequestError::Refused(c),
    }
}

/// How a failed send of a request ends a blocking call: `None` to try
/// again (no room or no connection yet), else the error.
fn unsendable(e: &PublishError) -> Option<RequestError> {
    match e {
        PublishError::BadTopic(_) => Some(RequestError::Refused(RejectCode::BadTopic)),
        PublishError::TooLarge { .. } => Some(RequestError::Refused(RejectCode::TooLarge)),
        PublishError::NotAnInbox(_) => Some(RequestError::Refused(RejectCode::BadTopic)),
        _ => None,
    }
}

/// Polls without parking this many times before each park while a
/// blocking request waits (a reply usually comes within them).
const SPINS: u32 = 2_000;

impl Client {
    /// Sends a request on `topic`: every subscriber of it (one member of
    /// each queue group) gets it with this client's inbox to reply on.
    /// Returns its id; [`Client::poll`] hands out its reply
    /// ([`ClientEvent::Reply`]) or why none will come
    /// ([`ClientEvent::RequestFailed`]: `NoResponders` at once when nothing
    /// subscribes, `TimedOut` after `timeout`, `Disconnected`).
    ///
    /// # Errors
    /// As [`Client::publish`]: nothing was sent.
    pub fn send_request(&mut self, topic: &str, payload: &[u8], timeout: Duration) -> Result<u64, PublishError> {
        self.send_request_as(topic, payload, timeout, false)
    }

    fn send_request_as(
        &mut self,
        topic: &str,
        payload: &[u8],
        timeout: Duration,
        many: bool,
    ) -> Result<u64, PublishError> {
        let id = self.requests.start(after(timeout), many);
        match self.send_publish(topic, payload, flags::REQUEST, Some(id)) {
            Ok(()) => Ok(id),
            Err(e) => {
                self.requests.end(id);
                Err(e)
            }
        }
    }

    /// Requests sent and still waiting for a reply (or their deadline).
    pub fn requests_waiting(&self) -> usize {
        self.requests.waiting.len()
    }

    /// Replies that matched no waiting request since the start (late:
    /// their request had timed out; or not meant for this session).
    pub fn stray_replies(&self) -> u64 {
        self.requests.stray
    }

    /// Answers a request ([`ClientEvent::Request`]) on its `inbox`.
    ///
    /// # Errors
    /// [`PublishError::NotAnInbox`] for a topic that is not an inbox (it
    /// would reach that topic's subscribers); otherwise as
    /// [`Client::publish`].
    pub fn reply(&mut self, inbox: &str, payload: &[u8]) -> Result<(), PublishError> {
        if !tickwire_wire::request::is_inbox(inbox) {
            return Err(PublishError::NotAnInbox(inbox.to_owned()));
        }
        self.send_publish(inbox, payload, 0, None)
    }

    /// Sends a request and waits for its reply, up to `timeout`, polling
    /// this client; every other event meanwhile goes to `other`.
    ///
    /// # Errors
    /// [`RequestError`]: no responders (at once), no reply in time, the
    /// connection lost, or the request refused.
    pub fn request(
        &mut self,
        topic: &str,
        payload: &[u8],
        timeout: Duration,
        mut other: impl FnMut(ClientEvent<'_>),
    ) -> Result<Vec<u8>, RequestError> {
        let until = after(timeout);
        let id = self.send_waiting(topic, payload, until, false, &mut other)?;
        let mut result = None;
        self.wait_for(|c| {
            c.poll(
                |e| match e {
                    ClientEvent::Reply { request, payload, .. } if request == id => result = Some(Ok(payload.to_vec())),
                    ClientEvent::RequestFailed { request, why } if request == id => result = Some(Err(why)),
                    e => other(e),
                },
                256,
            );
            result.is_some()
        });
        result.unwrap_or(Err(RequestError::TimedOut))
    }

    /// Sends a request and gathers its replies (scatter-gather: every
    /// subscriber answers) until `until` says stop; every other event
    /// meanwhile goes to `other`. Returns the replies in the order they
    /// came (none, if nothing answered in time).
    ///
    /// # Errors
    /// [`RequestError::NoResponders`] at once when nothing subscribes;
    /// the connection lost before any reply; the request refused.
    pub fn request_many(
        &mut self,
        topic: &str,
        payload: &[u8],
        until: Gather,
        mut other: impl FnMut(ClientEvent<'_>),
    ) -> Result<Vec<Vec<u8>>, RequestError> {
        let end = after(until.within);
        let id = self.send_waiting(topic, payload, end, true, &mut other)?;
        let (mut replies, mut last, mut failed) = (Vec::new(), Instant::now(), None);
        self.wait_for(|c| {
            c.poll(
                |e| match e {
                    ClientEvent::Reply { request, payload, .. } if request == id => {
                        replies.push(payload.to_vec());
                        last = Instant::now();
                    }
                    ClientEvent::RequestFailed { request, why } if request == id => failed = Some(why),
                    e => other(e),
                },
                256,
            );
            let counted = until.count.is_some_and(|n| replies.len() >= n);
            let quiet = until.quiet.is_some_and(|q| !replies.is_empty() && last.elapsed() >= q);
            failed.is_some() || counted || quiet
        });
        self.requests.end(id);
        match failed {
            Some(RequestError::TimedOut) | None => Ok(replies),
            Some(RequestError::Disconnected) if !replies.is_empty() => Ok(replies),
            Some(why) => Err(why),
        }
    }

    /// Sends a request for a blocking call, polling (events to `other`)
    /// while there is no room or no connection, until `until`.
    fn send_waiting(
        &mut self,
        topic: &str,
        payload: &[u8],
        until: Instant,
        many: bool,
        other: &mut impl FnMut(ClientEvent<'_>),
    ) -> Result<u64, RequestError> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.send_request_as(topic, payload, left, many) {
                Ok(id) => {
                    let _ = self.flush();
                    return Ok(id);
                }
                Err(e) => {
                    if let Some(why) = unsendable(&e) {
                        return Err(why);
                    }
                    if left.is_zero() {
                        return Err(RequestError::TimedOut);
                    }
                    self.poll(&mut *other, 256);
                    self.park(Duration::from_millis(1));
                }
            }
        }
    }

    /// Calls `step` until it says done: spinning a while, then parking
    /// briefly between calls (the request's own deadline ends it).
    fn wait_for(&mut self, mut step: impl FnMut(&mut Self) -> bool) {
        let mut spins = 0;
        while !step(self) {
            spins += 1;
            if spins >= SPINS {
                self.park(Duration::from_millis(1));
                spins = 0;
            }
        }
    }
}
