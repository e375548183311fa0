//! A sender's settings, counters and receiver changes.

use crate::auth::AuthKey;
use crate::invalid::InvalidCounts;
use crate::{FlowControl, Nanos, MAX_MTU};
use std::net::SocketAddrV4;
use tickwire_wire::FRAME_ALIGNMENT;

/// Sender settings. `Default` suits unicast on a LAN or loopback.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderConfig {
    /// Session identifier (new for every sender instance).
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Largest datagram, a multiple of 32 (frames are batched up to it).
    pub mtu: usize,
    /// Bytes of stream kept for retransmission (a power of two, at least
    /// 64 KiB). A gap older than this is reported lost.
    pub retention: usize,
    /// Largest message (at most half the retention).
    pub max_message: usize,
    /// A heartbeat is sent after this long without any datagram.
    pub heartbeat_interval: Nanos,
    /// SETUP is repeated this often until a receiver answers.
    pub setup_interval: Nanos,
    /// After retransmitting a range, NAKs for it are ignored this long.
    pub linger: Nanos,
    /// How receivers' windows combine.
    pub flow_control: FlowControl,
    /// A receiver silent this long no longer counts for flow control
    /// ([`ReceiverChange::TimedOut`]).
    pub receiver_timeout: Nanos,
    /// A multicast group: NAKs are taken only from receivers that have
    /// sent STATUS, each from the address it first sent from.
    pub multicast: bool,
    /// The shared key: every datagram carries its MAC and every one
    /// received must (see [`crate::auth`]). `None`: no authentication.
    pub auth: Option<AuthKey>,
    /// The first sequence number of this sender's keyed datagrams.
    pub first_sequence: u64,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            session_id: 1,
            stream_id: 1,
            mtu: 1408,
            retention: 16 << 20,
            max_message: 1 << 20,
            heartbeat_interval: 1_000_000,
            setup_interval: 10_000_000,
            linger: 200_000,
            flow_control: FlowControl::Min,
            receiver_timeout: 1_000_000_000,
            multicast: false,
            auth: None,
            first_sequence: 1,
        }
    }
}

/// What a sender has done, for counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Messages accepted by `offer`.
    pub messages: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// Datagrams produced (all kinds).
    pub datagrams: u64,
    /// HEARTBEAT frames sent.
    pub heartbeats: u64,
    /// SETUP frames sent.
    pub setups: u64,
    /// NAK frames received for this session.
    pub naks_received: u64,
    /// NAKs ignored because the range was being or had just been retransmitted.
    pub naks_coalesced: u64,
    /// NAKs for bytes no longer retained (answered with a heartbeat).
    pub naks_unrecoverable: u64,
    /// Datagrams retransmitted.
    pub retransmits: u64,
    /// Stream bytes retransmitted.
    pub retransmitted_bytes: u64,
    /// Offers refused with `BackPressured`.
    pub back_pressured: u64,
    /// Offers refused with `NotConnected`.
    pub not_connected: u64,
    /// STATUS frames received.
    pub status_received: u64,
    /// Datagrams or frames dropped as invalid (the sum of `invalid_by`).
    pub invalid: u64,
    /// The same, by reason.
    pub invalid_by: InvalidCounts,
    /// Frames for another session or stream.
    pub other_session: u64,
    /// Control datagrams the caller dropped unparsed because of where they
    /// came from (unicast: anywhere but the destination, through
    /// [`Sender::note_foreign`]), and frames naming a receiver from
    /// another address than the one it joined from, or (multicast) NAKs
    /// from an address that is no receiver's.
    pub frames_foreign: u64,
    /// Receivers that started counting for flow control.
    pub receivers_joined: u64,
    /// Receivers dropped from flow control after `receiver_timeout` of
    /// silence.
    pub receivers_timed_out: u64,
}

/// A receiver starting or stopping to count for flow control, from
/// [`Sender::poll_receiver_change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverChange {
    /// Its first STATUS arrived.
    Joined {
        /// The receiver's id.
        receiver_id: u32,
        /// Where it sends from.
        from: SocketAddrV4,
    },
    /// It sent no STATUS for `receiver_timeout`: it no longer holds the
    /// others back.
    TimedOut {
        /// The receiver's id.
        receiver_id: u32,
        /// Where it sent from.
        from: SocketAddrV4,
        /// How far it had consumed.
        consumption: u64,
    },
}

/// The datagram room for frames: the MTU less the AUTH frame on a keyed
/// channel.
pub(super) fn payload_mtu(cfg: &SenderConfig) -> usize {
    cfg.mtu - if cfg.auth.is_some() { tickwire_wire::auth::LEN } else { 0 }
}

/// Why a configuration is unusable.
pub(crate) fn check_sender(cfg: &SenderConfig) -> Result<(), &'static str> {
    if cfg.mtu % FRAME_ALIGNMENT != 0 || cfg.mtu < 128 || cfg.mtu > MAX_MTU {
        return Err("mtu must be a multiple of 32 between 128 and 65504");
    }
    if !cfg.retention.is_power_of_two() || cfg.retention < 64 << 10 || cfg.retention > 1 << 30 {
        return Err("retention must be a power of two between 64 KiB and 1 GiB");
    }
    if cfg.max_message > cfg.retention / 2 {
        return Err("max message must be at most half the retention");
    }
    if cfg.auth.is_some() && cfg.mtu < 192 {
        return Err("mtu must be at least 192 with a key (64 bytes of each datagram are its AUTH frame)");
    }
    Ok(())
}
