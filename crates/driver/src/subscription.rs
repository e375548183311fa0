//! [`Subscription`]: what an application reads through, on any channel.

use crate::udp::UdpReceiver;
use crate::{Channel, DriverError};
use std::time::Duration;
use tickwire_shm::{Context, LogReader, ReaderOptions};
use tickwire_wire::Event;

/// Reads a channel's stream: every message in order and exactly once, or an
/// [`Event::Lost`] naming the exact stream bytes that will never come.
///
/// Over `ipc:` the subscription is a reader of the shared-memory log (the
/// handler borrows each message in place). Over `udp://` it is a reliable
/// UDP receiver run in the caller's thread: `poll` reads datagrams, delivers
/// and sends NAK/STATUS.
///
/// # Examples
///
/// ```no_run
/// use tickwire_driver::{Channel, Event, Subscription};
/// let ctx = tickwire_shm::Context::new(tickwire_shm::default_dir())?;
/// let mut sub = Subscription::open(&ctx, &"ipc:md".parse::<Channel>()?, 10)?;
/// sub.poll(|event| match event {
///     Event::Message(m) => println!("{} {:?}", m.topic, m.payload),
///     Event::Lost { from, to, .. } => eprintln!("lost stream bytes [{from}, {to})"),
///     _ => {}
/// }, 64)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a subscription delivers nothing unless polled"]
pub struct Subscription(Inner);

// The shared-memory handle stays inline (no pointer to chase on the IPC hot
// path); the much larger network endpoint is boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Inner {
    Ipc(LogReader),
    Udp(Box<UdpReceiver>),
}

impl From<LogReader> for Subscription {
    fn from(r: LogReader) -> Self {
        Self(Inner::Ipc(r))
    }
}

impl From<UdpReceiver> for Subscription {
    fn from(r: UdpReceiver) -> Self {
        Self(Inner::Udp(Box::new(r)))
    }
}

impl Subscription {
    /// Opens a subscription on `channel`/`stream_id` with default settings
    /// (a tethered reader for `ipc:`; the URI's keys for `udp://`).
    ///
    /// # Errors
    /// [`DriverError::Shm`] if the log does not exist yet or is unusable
    /// (`ShmError::NoPublisher`, `Stale`, `Foreign`, ...), or the errors of
    /// [`UdpReceiver::open`] (for example the port is taken).
    pub fn open(ctx: &Context, channel: &Channel, stream_id: u32) -> Result<Self, DriverError> {
        Ok(match channel {
            Channel::Ipc(name) => ctx.reader(name, stream_id, ReaderOptions::default())?.into(),
            Channel::Udp(uri) => UdpReceiver::open(uri, stream_id, Some(ctx.counters()))?.into(),
        })
    }

    /// Delivers up to `limit` fragments' (shared memory) or events' (network)
    /// worth to `handler`, in stream order. Returns how many (0: nothing new).
    ///
    /// # Errors
    /// [`DriverError::Poll`] if a shared-memory log breaks the protocol,
    /// [`DriverError::Transport`] if the socket fails.
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, handler: F, limit: usize) -> Result<usize, DriverError> {
        match &mut self.0 {
            Inner::Ipc(r) => Ok(r.poll(handler, limit)?),
            Inner::Udp(r) => r.poll(handler, limit),
        }
    }

    /// Sleeps until data may have arrived or `max` passes (for idle
    /// strategies that park; costs no CPU while asleep).
    pub fn park(&mut self, max: Duration) {
        match &mut self.0 {
            Inner::Ipc(r) => r.park(max),
            Inner::Udp(r) => r.park(max),
        }
    }

    /// The shared-memory log's reader (for its position, lossy state and
    /// publisher liveness); `None` on a network channel.
    pub fn log_reader(&mut self) -> Option<&mut LogReader> {
        match &mut self.0 {
            Inner::Ipc(r) => Some(r),
            Inner::Udp(_) => None,
        }
    }

    /// The network endpoint (its counters); `None` on shared memory.
    pub fn udp_receiver(&mut self) -> Option<&mut UdpReceiver> {
        match &mut self.0 {
            Inner::Ipc(_) => None,
            Inner::Udp(r) => Some(r),
        }
    }

    /// Before leaving: on the network, keeps answering the publication for
    /// a moment ([`UdpReceiver::linger`]) so that its close can learn what
    /// this subscription received; messages that arrive meanwhile are
    /// discarded. Nothing to do for shared memory.
    pub fn linger(&mut self) {
        if let Inner::Udp(r) = &mut self.0 {
            r.linger(Duration::from_millis(20), Duration::from_millis(500));
        }
    }

    /// The publication closed the stream and everything it sent was
    /// delivered.
    pub fn is_ended(&self) -> bool {
        match &self.0 {
            Inner::Ipc(r) => r.is_end_of_stream(),
            Inner::Udp(r) => r.is_ended(),
        }
    }
}
