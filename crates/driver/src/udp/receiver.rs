//! A subscription on a `udp://` channel: the receiver core over a transport.

use crate::config::{ChannelConfig, DriverError};
use crate::now_ns;
use crate::ChannelUri;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;
use tickwire_proto::{Event, Invalid, Receiver, ReceiverStats};
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use tickwire_transport::{RecvBatch, Transport};

/// Receives a channel's stream in order, exactly once, or says what was
/// lost ([`Event::Lost`]); never silently.
///
/// Runs in the caller's thread: `poll` reads datagrams, delivers messages to
/// the handler, and sends NAK/STATUS.
///
/// ```no_run
/// use tickwire_driver::{udp::UdpReceiver, ChannelUri, Event};
/// let uri: ChannelUri = "udp://127.0.0.1:40123".parse()?;
/// let mut sub = UdpReceiver::open(&uri, 10, None)?;
/// sub.poll(|ev| if let Event::Message(m) = ev { println!("{:?}", m.payload) }, 10)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a receiver delivers nothing unless polled"]
pub struct UdpReceiver {
    receiver: Receiver,
    transport: Box<dyn Transport>,
    /// Multicast: control goes to the group, not to the session's source.
    group: Option<SocketAddrV4>,
    rx: RecvBatch,
    ctrl: Vec<u8>,
    next_counters: u64,
    counters: Option<CounterSet>,
    /// The AF_XDP counters, if the channel asked for AF_XDP.
    xdp_counters: Option<CounterSet>,
    /// Which path the datagrams take and why (AF_XDP or its fallback).
    transport_note: Option<String>,
    xdp_fell_back: bool,
    send_errors: u64,
}

impl std::fmt::Debug for UdpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpReceiver")
            .field("source", &self.receiver.source())
            .field("stats", self.receiver.stats())
            .finish()
    }
}

impl UdpReceiver {
    /// Opens a subscription on `uri`/`stream_id`: binds the endpoint (and
    /// joins the group for multicast).
    ///
    /// # Errors
    /// [`DriverError`] for a bad URI or setting, or a socket that cannot be
    /// opened (for example the port is taken).
    pub fn open(uri: &ChannelUri, stream_id: u32, counters: Option<&Arc<CountersFile>>) -> Result<Self, DriverError> {
        Self::with_config(&ChannelConfig::from_uri(uri)?, stream_id, counters)
    }

    /// Opens with settings already read from a URI.
    ///
    /// # Errors
    /// As [`UdpReceiver::open`].
    pub fn with_config(
        cfg: &ChannelConfig,
        stream_id: u32,
        counters: Option<&Arc<CountersFile>>,
    ) -> Result<Self, DriverError> {
        let rcfg = tickwire_proto::ReceiverConfig { stream_id, ..cfg.receiver.clone() };
        let receiver_id = rcfg.receiver_id;
        let receiver = Receiver::new(rcfg).map_err(DriverError::Config)?;
        let opened = super::open_transport(cfg, false)?;
        let transport = opened.transport;
        let label = cfg.uri.to_string();
        let xdp_counters = match counters {
            Some(c) if cfg.xdp.want != super::xdp::XdpUse::Off => {
                Some(c.allocate(Kind::Xdp, stream_id, receiver_id, &label)?)
            }
            _ => None,
        };
        let counters = counters.map(|c| c.allocate(Kind::UdpReceiver, stream_id, receiver_id, &label)).transpose()?;
        Ok(Self {
            receiver,
            transport,
            group: cfg.uri.is_multicast().then_some(cfg.uri.endpoint),
            rx: RecvBatch::new(32, 65_536),
            ctrl: vec![0; 1408],
            next_counters: 0,
            counters,
            xdp_counters,
            transport_note: opened.note,
            xdp_fell_back: opened.fell_back,
            send_errors: 0,
        })
    }

    /// What the built-in impairment did (send data, send control, receive
    /// data, receive control), if the URI asked for any.
    pub fn impairment(&self) -> Option<[tickwire_impair::ImpairStats; 4]> {
        self.transport.impairment()
    }
    /// Protocol counters.
    pub fn stats(&self) -> &ReceiverStats {
        self.receiver.stats()
    }
    /// The session being received and the next position.
    pub fn session(&self) -> Option<(u32, u64)> {
        self.receiver.session()
    }
    /// The session closed and everything was delivered.
    pub fn is_ended(&self) -> bool {
        self.receiver.is_ended()
    }
    /// This receiver's identity in STATUS and NAK.
    pub fn receiver_id(&self) -> u32 {
        self.receiver.config().receiver_id
    }
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.transport.local_addr()
    }

    /// One duty cycle: reads waiting datagrams (one `recvmmsg`), delivers
    /// up to `limit` events in order, then sends due NAK and STATUS.
    /// Returns the events delivered.
    ///
    /// # Errors
    /// [`DriverError::Transport`] if the socket fails (not for would-block).
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, handler: F, limit: usize) -> Result<usize, DriverError> {
        let now = now_ns();
        let n = self.transport.recv_batch(&mut self.rx)?;
        for i in 0..n {
            // The core locks on to the session's source (see
            // `tickwire_proto::Receiver::handle_datagram`).
            let (d, from) = self.rx.get(i);
            self.receiver.handle_datagram(now, from, d);
        }
        let delivered = self.receiver.poll_messages(handler, limit);
        if self.receiver.poll_timeout().is_some_and(|t| t <= now) {
            self.receiver.handle_timeout(now);
        }
        while let Some((len, to)) = self.receiver.poll_transmit(now, &mut self.ctrl) {
            let to = self.group.unwrap_or(to);
            if self.transport.send_batch(to, &[&self.ctrl[..len]]).is_err() {
                self.send_errors += 1;
            }
        }
        if now >= self.next_counters {
            self.publish_counters();
            self.next_counters = now + 1_000_000;
        }
        Ok(delivered)
    }

    /// Which path the datagrams take and why: the AF_XDP set-up, or why
    /// it fell back to kernel UDP (`xdp=auto`); `None` without `xdp=`.
    pub fn transport_note(&self) -> Option<&str> {
        self.transport_note.as_deref()
    }

    /// What the AF_XDP path did, if this channel uses it.
    pub fn xdp_stats(&self) -> Option<tickwire_transport::XdpStats> {
        self.transport.xdp_stats()
    }

    fn publish_counters(&self) {
        super::publish_xdp(self.xdp_counters.as_ref(), self.transport.as_ref(), self.xdp_fell_back);
        if let Some(c) = &self.counters {
            let s = self.receiver.stats();
            c.set_all(&[
                s.messages,
                s.bytes,
                s.naks_sent,
                s.gaps_detected,
                s.lost_events,
                s.lost_bytes,
                s.invalid,
                s.duplicates,
                s.frames_foreign,
                s.invalid_by.get(Invalid::Unauthenticated),
                s.invalid_by.get(Invalid::Replayed),
                s.other_session,
            ]);
        }
    }

    /// After the end, keeps answering the sender (as TCP's TIME_WAIT
    /// does) until no datagram has come for `quiet`, at most `max`: if the
    /// STATUS saying the end was delivered is lost, the closing sender's
    /// next END_OF_STREAM heartbeat is answered, so its `close` learns this
    /// receiver has everything. A receiver that leaves at once may make an
    /// honest `close` report it incomplete.
    pub fn linger(&mut self, quiet: Duration, max: Duration) {
        let start = std::time::Instant::now();
        let (mut seen, mut since) = (self.receiver.stats().datagrams, std::time::Instant::now());
        while start.elapsed() < max && since.elapsed() < quiet {
            if self.poll(|_| {}, 16).is_err() {
                return;
            }
            let now = self.receiver.stats().datagrams;
            if now != seen {
                (seen, since) = (now, std::time::Instant::now());
            }
            self.park(Duration::from_micros(200));
        }
    }

    /// Waits up to `max` for a datagram or the next timer (for parking idle
    /// strategies).
    pub fn park(&mut self, max: Duration) {
        let until = self.receiver.poll_timeout().map_or(u64::MAX, |t| t.saturating_sub(now_ns()));
        let _ = self.transport.wait(max.min(Duration::from_nanos(until)));
    }
}

impl Drop for UdpReceiver {
    fn drop(&mut self) {
        self.publish_counters();
    }
}
