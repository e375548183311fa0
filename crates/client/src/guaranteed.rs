//! Guaranteed publishing and durable subscriptions, client side.
//!
//! A guaranteed publish is kept in the [`Outbox`] until the router
//! acknowledges it (cumulatively, by this client's publisher sequence):
//! sent at once if it can be, else on the next poll, and sent again in
//! order after every reconnection (the router recognises what it already
//! stored by the publisher id in HELLO and the sequence). The outbox is
//! bounded ([`ClientOptions::guaranteed_window`](crate::ClientOptions)):
//! a full one is back-pressure.

use crate::client::{Client, PublishError, State};
use crate::conn::SendError;
use std::collections::VecDeque;
use tickwire_topic::check_topic;
use tickwire_wire::client::{flags, ClientKind, ClientRepr};

/// One guaranteed publish awaiting its acknowledgement.
#[derive(Debug, Clone)]
struct Outgoing {
    sequence: u64,
    topic: String,
    payload: Vec<u8>,
}

/// Guaranteed publishes not yet acknowledged (sans-IO).
#[derive(Debug)]
pub(crate) struct Outbox {
    waiting: VecDeque<Outgoing>,
    /// How many of `waiting` went out on the current connection.
    sent: usize,
    /// The next publisher sequence (from 1).
    next: u64,
    /// The highest sequence the router acknowledged.
    acknowledged: u64,
    /// This client's publisher id (random, nonzero; sent in HELLO).
    pub(crate) publisher: u64,
}

impl Outbox {
    pub(crate) fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS's randomness.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        Self { waiting: VecDeque::new(), sent: 0, next: 1, acknowledged: 0, publisher: h.finish().max(1) }
    }

    /// The router acknowledged everything up to `seq`.
    pub(crate) fn ack(&mut self, seq: u64) {
        self.acknowledged = self.acknowledged.max(seq);
        while self.waiting.front().is_some_and(|o| o.sequence <= seq) {
            self.waiting.pop_front();
            self.sent = self.sent.saturating_sub(1);
        }
    }

    /// Whether nothing awaits acknowledgement.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// A new connection: everything waiting goes out again.
    pub(crate) fn restart(&mut self) {
        self.sent = 0;
    }
}

impl Client {
    /// Publishes `payload` on `topic` in guaranteed mode: the router stores
    /// it in its journal before acknowledging it, and this client keeps it
    /// (and sends it again after a reconnection) until then. Works while
    /// disconnected too: it goes out when the router is back. Returns its
    /// publisher sequence ([`Client::acknowledged`] reaches it).
    ///
    /// # Errors
    /// [`PublishError::WindowFull`] while `guaranteed_window` publishes
    /// await acknowledgement (poll, then try again);
    /// [`PublishError::BadTopic`].
    pub fn publish_guaranteed(&mut self, topic: &str, payload: &[u8]) -> Result<u64, PublishError> {
        check_topic(topic)?;
        self.check_size(topic, payload.len())?;
        if self.outbox.waiting.len() >= self.opts.guaranteed_window {
            return Err(PublishError::WindowFull(self.outbox.waiting.len()));
        }
        let sequence = self.outbox.next;
        self.outbox.next += 1;
        self.outbox.waiting.push_back(Outgoing { sequence, topic: topic.to_owned(), payload: payload.to_vec() });
        self.pump();
        Ok(sequence)
    }

    /// The highest publisher sequence the router acknowledged (every
    /// guaranteed publish up to it is stored).
    pub fn acknowledged(&self) -> u64 {
        self.outbox.acknowledged
    }

    /// Guaranteed publishes awaiting acknowledgement.
    pub fn unacknowledged(&self) -> usize {
        self.outbox.waiting.len()
    }

    /// Sends what waits in the outbox and has not gone out on this
    /// connection, while the connection takes it.
    pub(crate) fn pump(&mut self) {
        if self.state != State::Connected {
            return;
        }
        let Some(conn) = &mut self.conn else { return };
        while let Some(o) = self.outbox.waiting.get(self.outbox.sent) {
            let f = ClientRepr {
                flags: flags::GUARANTEED,
                sequence: o.sequence,
                topic: &o.topic,
                body: &o.payload,
                ..ClientRepr::new(ClientKind::Publish)
            };
            match conn.send(&f) {
                Ok(()) => self.outbox.sent += 1,
                Err(SendError::Full) => return,
                Err(SendError::Broken(why) | SendError::Refused(why)) => return self.lose(why),
            }
        }
    }

    /// Acknowledges every delivery of durable subscription `subscription`
    /// up to journal sequence `sequence` ([`crate::Delivery::sequence`]):
    /// the router will not send them again. For a durable queue's consumer
    /// ([`crate::Client::subscribe_durable_queue`]) it acknowledges that
    /// one delivery.
    pub fn ack(&mut self, subscription: u32, sequence: u64) {
        if self.state == State::Connected {
            self.send_control(&ClientRepr { value: subscription, sequence, ..ClientRepr::new(ClientKind::Ack) });
        }
    }
}
