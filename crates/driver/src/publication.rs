//! [`Publication`]: what an application publishes through, on any channel.

use crate::udp::{CloseError, UdpSender};
use crate::{Channel, DriverError};
use std::time::Duration;
use tickwire_shm::{Context, LogAppender, LogConfig};
use tickwire_wire::OfferError;

/// Publishes messages on a channel: in order, whole, to every subscription,
/// or (network) with unrecoverable loss reported to the subscription that
/// suffered it, never silently.
///
/// Over `ipc:` the publication is the appender of a shared-memory log
/// (`offer` writes the frame in place; no system call). Over `udp://` it is
/// a reliable UDP sender run in the caller's thread: call
/// [`Publication::do_work`] after offers and whenever idle.
///
/// # Examples
///
/// ```no_run
/// use tickwire_driver::{Channel, Publication};
/// let ctx = tickwire_shm::Context::new(tickwire_shm::default_dir())?;
/// let channel: Channel = "ipc:md".parse()?;
/// let mut publication = Publication::open(&ctx, &channel, 10)?;
/// while publication.offer(b"bid 101.25").is_err() {
///     publication.do_work(); // nobody listening yet, or back-pressured
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a publication publishes nothing unless offered to"]
pub struct Publication(Inner);

// The shared-memory handle stays inline (no pointer to chase on the IPC hot
// path); the much larger network endpoint is boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Inner {
    Ipc(LogAppender),
    Udp(Box<UdpSender>),
}

impl From<LogAppender> for Publication {
    fn from(a: LogAppender) -> Self {
        Self(Inner::Ipc(a))
    }
}

impl From<UdpSender> for Publication {
    fn from(s: UdpSender) -> Self {
        Self(Inner::Udp(Box::new(s)))
    }
}

impl Publication {
    /// Opens a publication on `channel`/`stream_id` with default settings
    /// (a [`LogConfig::default`] log for `ipc:`; the URI's keys for
    /// `udp://`). Counters go to `ctx`'s counters file.
    ///
    /// # Errors
    /// [`DriverError::Shm`] if the log cannot be created (for example a live
    /// publication owns it), or the errors of [`UdpSender::open`].
    pub fn open(ctx: &Context, channel: &Channel, stream_id: u32) -> Result<Self, DriverError> {
        Ok(match channel {
            Channel::Ipc(name) => ctx.appender(name, stream_id, &LogConfig::default())?.into(),
            Channel::Udp(uri) => UdpSender::open(uri, stream_id, Some(ctx.counters()))?.into(),
        })
    }

    /// Publishes `msg`, fragmenting it if it exceeds one frame; returns the
    /// stream position after it.
    ///
    /// # Errors
    /// [`OfferError`]: nothing was published; `NotConnected` and
    /// `BackPressured` are worth retrying (after `do_work`).
    #[inline]
    pub fn offer(&mut self, msg: &[u8]) -> Result<u64, OfferError> {
        self.offer_topic("", msg)
    }

    /// [`Publication::offer`] with a topic carried in the message.
    ///
    /// # Errors
    /// As [`Publication::offer`], plus [`OfferError::TopicTooLong`].
    #[inline]
    pub fn offer_topic(&mut self, topic: &str, msg: &[u8]) -> Result<u64, OfferError> {
        match &mut self.0 {
            Inner::Ipc(a) => a.offer_topic(topic, msg),
            Inner::Udp(s) => s.offer_topic(topic, msg),
        }
    }

    /// One duty cycle: sends what was offered and serves NAK/STATUS
    /// (network), refreshes liveness and reaps dead readers (shared memory).
    /// Returns the work done.
    pub fn do_work(&mut self) -> usize {
        match &mut self.0 {
            Inner::Ipc(a) => a.do_work(),
            Inner::Udp(s) => s.do_work(),
        }
    }

    /// Whether anybody is listening (a reader attached, a receiver answered).
    pub fn is_connected(&mut self) -> bool {
        match &mut self.0 {
            Inner::Ipc(a) => a.is_connected(),
            Inner::Udp(s) => s.is_connected(),
        }
    }

    /// Stream position after the last accepted message.
    pub fn position(&self) -> u64 {
        match &self.0 {
            Inner::Ipc(a) => a.position(),
            Inner::Udp(s) => s.position(),
        }
    }

    /// The shared-memory log's appender, for zero-copy claims
    /// ([`LogAppender::try_claim`]); `None` on a network channel.
    pub fn log_appender(&mut self) -> Option<&mut LogAppender> {
        match &mut self.0 {
            Inner::Ipc(a) => Some(a),
            Inner::Udp(_) => None,
        }
    }

    /// The network endpoint (its counters, receiver changes); `None` on
    /// shared memory.
    pub fn udp_sender(&mut self) -> Option<&mut UdpSender> {
        match &mut self.0 {
            Inner::Ipc(_) => None,
            Inner::Udp(s) => Some(s),
        }
    }

    /// Ends the stream: readers drain what was published and see the end.
    /// On the network, sends what is left and serves NAKs until every
    /// receiver has everything or `timeout` passes, and returns how many
    /// receivers acknowledged everything. Shared-memory readers read the
    /// log in place and acknowledge nothing: `Ok(0)`.
    ///
    /// # Errors
    /// On the network, [`CloseError`]: no receiver ever connected, or not
    /// every one had everything by `timeout`.
    pub fn close(self, timeout: Duration) -> Result<usize, CloseError> {
        match self.0 {
            Inner::Ipc(a) => {
                drop(a);
                Ok(0)
            }
            Inner::Udp(mut s) => s.close(timeout),
        }
    }
}

impl tickwire_agent::Agent for Publication {
    fn do_work(&mut self) -> usize {
        Publication::do_work(self)
    }
    fn role(&self) -> &str {
        "publication"
    }
}
