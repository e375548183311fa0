//! A publication on a `udp://` channel: the sender core over a transport.

use crate::config::{random_u32, ChannelConfig, DriverError};
use crate::now_ns;
use crate::ChannelUri;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_proto::{Invalid, OfferError, ReceiverChange, Sender, SenderStats};
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use tickwire_transport::{RecvBatch, Transport, MAX_BATCH};

/// Publishes messages on a channel, reliably: lost datagrams are repaired on
/// NAK, and receivers that fall beyond the retention are told what they lost.
///
/// Runs in the caller's thread: `offer` appends, `do_work` sends, reads
/// NAK/STATUS and heartbeats. Call `do_work` after offers and whenever idle.
///
/// ```no_run
/// use tickwire_driver::{udp::UdpSender, ChannelUri};
/// let uri: ChannelUri = "udp://127.0.0.1:40123".parse()?;
/// let mut publication = UdpSender::open(&uri, 10, None)?;
/// while !publication.is_connected() { publication.do_work(); }
/// publication.offer(b"hello")?;
/// publication.do_work();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a sender sends nothing unless offered to and driven by do_work"]
pub struct UdpSender {
    sender: Sender,
    transport: Box<dyn Transport>,
    dest: std::net::SocketAddrV4,
    /// Multicast: control comes from every receiver in the group, not from `dest`.
    multicast: bool,
    out: Vec<u8>,
    lens: [usize; MAX_BATCH],
    queued: usize,
    flushed: usize,
    rx: RecvBatch,
    control_poll: u64,
    next_control_poll: u64,
    next_timeout: u64,
    next_counters: u64,
    counters: Option<CounterSet>,
    /// The AF_XDP counters, if the channel asked for AF_XDP.
    xdp_counters: Option<CounterSet>,
    /// Which path the datagrams take and why (AF_XDP or its fallback).
    transport_note: Option<String>,
    xdp_fell_back: bool,
    send_errors: u64,
}

impl std::fmt::Debug for UdpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSender").field("dest", &self.dest).field("stats", self.sender.stats()).finish()
    }
}

impl UdpSender {
    /// Opens a publication on `uri`/`stream_id` with a new random session.
    /// Counters go to `counters` if given (see `tickwire stat`).
    ///
    /// # Errors
    /// [`DriverError`] for a bad URI or setting, or a socket that cannot be
    /// opened.
    pub fn open(uri: &ChannelUri, stream_id: u32, counters: Option<&Arc<CountersFile>>) -> Result<Self, DriverError> {
        let cfg = ChannelConfig::from_uri(uri)?;
        Self::with_config(&cfg, stream_id, counters)
    }

    /// Opens with settings already read from a URI.
    ///
    /// # Errors
    /// As [`UdpSender::open`].
    pub fn with_config(
        cfg: &ChannelConfig,
        stream_id: u32,
        counters: Option<&Arc<CountersFile>>,
    ) -> Result<Self, DriverError> {
        let session_id = random_u32();
        let scfg = tickwire_proto::SenderConfig { session_id, stream_id, ..cfg.sender.clone() };
        let mtu = scfg.mtu;
        let sender = Sender::new(scfg, now_ns()).map_err(DriverError::Config)?;
        let opened = super::open_transport(cfg, true)?;
        let transport = opened.transport;
        let label = cfg.uri.to_string();
        let xdp_counters = match counters {
            Some(c) if cfg.xdp.want != super::xdp::XdpUse::Off => {
                Some(c.allocate(Kind::Xdp, stream_id, session_id, &label)?)
            }
            _ => None,
        };
        let counters = counters.map(|c| c.allocate(Kind::UdpSender, stream_id, session_id, &label)).transpose()?;
        Ok(Self {
            sender,
            transport,
            dest: cfg.uri.endpoint,
            multicast: cfg.uri.is_multicast(),
            out: vec![0; MAX_BATCH * mtu],
            lens: [0; MAX_BATCH],
            queued: 0,
            flushed: 0,
            rx: RecvBatch::new(16, 2048),
            control_poll: cfg.control_poll.as_nanos() as u64,
            next_control_poll: 0,
            next_timeout: 0,
            next_counters: 0,
            counters,
            xdp_counters,
            transport_note: opened.note,
            xdp_fell_back: opened.fell_back,
            send_errors: 0,
        })
    }

    /// The address this publication sends from (where receivers' STATUS
    /// and NAK arrive).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.transport.local_addr()
    }

    /// The session this publication sends as.
    pub fn session_id(&self) -> u32 {
        self.sender.config().session_id
    }
    /// Stream position after the last accepted message.
    pub fn position(&self) -> u64 {
        self.sender.position()
    }
    /// Largest message accepted.
    pub fn max_message(&self) -> usize {
        self.sender.config().max_message
    }
    /// What the built-in impairment did (send data, send control, receive
    /// data, receive control), if the URI asked for any.
    pub fn impairment(&self) -> Option<[tickwire_impair::ImpairStats; 4]> {
        self.transport.impairment()
    }
    /// Protocol counters.
    pub fn stats(&self) -> &SenderStats {
        self.sender.stats()
    }
    /// Send errors other than would-block (the datagrams are repaired by NAK).
    pub fn send_errors(&self) -> u64 {
        self.send_errors
    }
    /// At least one receiver has answered (offers are accepted).
    pub fn is_connected(&self) -> bool {
        self.sender.is_connected()
    }
    /// Receivers counted for flow control.
    pub fn receivers(&self) -> usize {
        self.sender.receivers()
    }
    /// The next receiver that joined, or was dropped from flow control
    /// after `receiver-timeout` of silence (so that a dead receiver no
    /// longer holds the live ones back).
    pub fn poll_receiver_change(&mut self) -> Option<ReceiverChange> {
        self.sender.poll_receiver_change()
    }

    /// Appends a message; it is sent by the next `do_work`.
    ///
    /// # Errors
    /// [`OfferError::NotConnected`] before a receiver answers,
    /// [`OfferError::BackPressured`] at the flow-control limit (call
    /// `do_work` and retry), [`OfferError::MaxMessageExceeded`],
    /// [`OfferError::TopicTooLong`], [`OfferError::Closed`].
    #[inline]
    pub fn offer(&mut self, msg: &[u8]) -> Result<u64, OfferError> {
        self.sender.offer("", msg)
    }

    /// Appends a message with a topic.
    ///
    /// # Errors
    /// As [`UdpSender::offer`].
    pub fn offer_topic(&mut self, topic: &str, msg: &[u8]) -> Result<u64, OfferError> {
        self.sender.offer(topic, msg)
    }

    /// One duty cycle: reads control datagrams (at most every
    /// `control-poll`), expires timers, and sends everything due in batches
    /// of up to 64 datagrams per system call. Returns the work done.
    pub fn do_work(&mut self) -> usize {
        let now = now_ns();
        let mut work = 0;
        if now >= self.next_control_poll {
            let n = self.transport.recv_batch(&mut self.rx).unwrap_or(0);
            for i in 0..n {
                let (d, from) = self.rx.get(i);
                // Unicast: the receiver answers from the address we send
                // to. A STATUS or NAK from anywhere else (a fake receiver
                // granting a huge window) is dropped unparsed.
                if !self.multicast && from != self.dest {
                    self.sender.note_foreign();
                    continue;
                }
                self.sender.handle_datagram(now, from, d);
            }
            work += n;
            self.next_control_poll = if n > 0 { now } else { now + self.control_poll };
        }
        if now >= self.next_timeout {
            self.sender.handle_timeout(now);
            self.next_timeout = now + 100_000;
        }
        work += self.transmit(now);
        if now >= self.next_counters {
            self.publish_counters();
            self.next_counters = now + 1_000_000;
        }
        work
    }

    fn transmit(&mut self, now: u64) -> usize {
        let mut sent = 0;
        loop {
            if self.flushed == self.queued {
                self.flushed = 0;
                self.queued = 0;
                let mtu = self.sender.config().mtu;
                while self.queued < MAX_BATCH {
                    let slot = &mut self.out[self.queued * mtu..(self.queued + 1) * mtu];
                    let Some(n) = self.sender.poll_transmit(now, slot) else { break };
                    self.lens[self.queued] = n;
                    self.queued += 1;
                }
                if self.queued == 0 {
                    return sent;
                }
            }
            let mtu = self.sender.config().mtu;
            let mut refs: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
            for (i, r) in refs.iter_mut().enumerate().take(self.queued).skip(self.flushed) {
                *r = &self.out[i * mtu..i * mtu + self.lens[i]];
            }
            match self.transport.send_batch(self.dest, &refs[self.flushed..self.queued]) {
                Ok(0) => return sent,
                Ok(n) => {
                    self.flushed += n;
                    sent += n;
                }
                Err(_) => {
                    // Dropped here, repaired by NAK like any other loss.
                    self.send_errors += 1;
                    self.flushed = self.queued;
                }
            }
        }
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
            let s = self.sender.stats();
            c.set_all(&[
                s.messages,
                s.bytes,
                s.naks_received,
                s.retransmits,
                s.heartbeats,
                s.back_pressured,
                s.invalid,
                s.naks_unrecoverable,
                s.frames_foreign,
                s.invalid_by.get(Invalid::Unauthenticated),
                s.invalid_by.get(Invalid::Replayed),
                s.receivers_joined,
                s.receivers_timed_out,
            ]);
        }
    }

    /// Closes the stream: sends what is left, then END_OF_STREAM heartbeats,
    /// and serves NAKs until every receiver has consumed everything and
    /// said it delivered the end, or `timeout` passes. Returns how many
    /// receivers acknowledged everything.
    ///
    /// # Errors
    /// [`CloseError::NoReceiver`] if no receiver ever connected (nothing
    /// was delivered to anyone), [`CloseError::Incomplete`] if some
    /// receiver had not acknowledged everything when `timeout` passed.
    pub fn close(&mut self, timeout: Duration) -> Result<usize, CloseError> {
        self.sender.close();
        let start = Instant::now();
        loop {
            self.do_work();
            // Drained once closed means every receiver said it delivered
            // the end, so no last END_OF_STREAM heartbeat is owed.
            if self.sender.is_sent() && self.sender.is_drained() && self.queued == self.flushed {
                self.publish_counters();
                return Ok(self.sender.acknowledged());
            }
            if start.elapsed() >= timeout {
                break;
            }
            let _ = self.transport.wait(Duration::from_micros(100));
        }
        self.publish_counters();
        if !self.sender.ever_connected() {
            return Err(CloseError::NoReceiver);
        }
        Err(CloseError::Incomplete { acknowledged: self.sender.acknowledged(), receivers: self.sender.receivers() })
    }

    /// Waits up to `max` for a control datagram or the next timer.
    pub fn park(&mut self, max: Duration) {
        let now = now_ns();
        let until = self.sender.poll_timeout().map_or(u64::MAX, |t| t.saturating_sub(now));
        let _ = self.transport.wait(max.min(Duration::from_nanos(until)));
    }
}

/// Why a publication's close did not end with every receiver holding
/// everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CloseError {
    /// No receiver ever connected: nothing published was delivered.
    #[error("no receiver ever connected: nothing published was delivered")]
    NoReceiver,
    /// The timeout passed first.
    #[error("{acknowledged} of {receivers} receiver(s) acknowledged everything before the timeout")]
    Incomplete {
        /// Receivers that had everything.
        acknowledged: usize,
        /// Receivers still counted (silent ones are dropped after `receiver-timeout`).
        receivers: usize,
    },
}

impl tickwire_agent::Agent for UdpSender {
    fn do_work(&mut self) -> usize {
        UdpSender::do_work(self)
    }
    fn role(&self) -> &str {
        "udp-sender"
    }
}
