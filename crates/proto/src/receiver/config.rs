//! A receiver's settings and counters.

use crate::auth::AuthKey;
use crate::invalid::InvalidCounts;
use crate::{NakDelay, Nanos};

/// Receiver settings. `Default` suits unicast.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverConfig {
    /// Stream to accept.
    pub stream_id: u32,
    /// This receiver's identity in STATUS and NAK frames.
    pub receiver_id: u32,
    /// Reorder window and flow-control grant (power of two, 64 KiB..1 GiB).
    pub window: usize,
    /// Delay before the first NAK of a gap.
    pub nak_delay: NakDelay,
    /// Least delay before NAKing a gap again (the repair was lost). The
    /// receiver stretches it to twice the measured NAK-to-repair time (a
    /// bulk transfer queues repairs behind data) and doubles it per retry.
    pub nak_retry: Nanos,
    /// The retry delay before any repair time has been measured: a bulk
    /// stream can queue a repair behind a full window of data, so the first
    /// guess is conservative, as TCP's initial RTO is.
    pub nak_retry_initial: Nanos,
    /// The longest wait between NAKs of one gap, however long repairs have
    /// taken and however often it was retried: a repair time measured under
    /// a burst of delay must not leave a gap unasked for seconds.
    pub nak_retry_max: Nanos,
    /// STATUS is sent at least this often (and whenever a quarter of the
    /// window has been consumed since the last one).
    pub status_interval: Nanos,
    /// A session silent this long may be replaced by a new one.
    pub session_timeout: Nanos,
    /// How often to ask an unknown session for SETUP.
    pub setup_request_interval: Nanos,
    /// Largest message reassembled (bounds memory).
    pub max_message: usize,
    /// Seeds the NAK back-off and the SETUP challenges.
    pub seed: u64,
    /// A multicast group: other receivers' NAKs are heard (and suppress
    /// ours); control goes to the group. Unicast: only the session's source
    /// is heard once a session is set up.
    pub multicast: bool,
    /// The shared key: every datagram must carry its MAC (see
    /// [`crate::auth`]). `None`: no authentication.
    pub auth: Option<AuthKey>,
    /// The first sequence number of this receiver's keyed datagrams (the
    /// driver uses the wall clock, so that a restarted receiver with the
    /// same id is not taken for a replay).
    pub first_sequence: u64,
    /// Seeds the challenges of keyed SETUP requests. It must differ
    /// between runs (the driver takes it from the OS): a receiver that
    /// issued the same challenge again could be sent a captured SETUP.
    pub challenge_seed: u64,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            stream_id: 1,
            receiver_id: 1,
            window: 1 << 20,
            nak_delay: NakDelay::Static(20_000),
            nak_retry: 500_000,
            nak_retry_initial: 10_000_000,
            nak_retry_max: 250_000_000,
            status_interval: 1_000_000,
            session_timeout: 1_000_000_000,
            setup_request_interval: 1_000_000,
            max_message: 1 << 20,
            seed: 0,
            multicast: false,
            auth: None,
            first_sequence: 1,
            challenge_seed: 0,
        }
    }
}

/// What a receiver has seen and done, for counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Datagrams handled.
    pub datagrams: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Frames received twice (dropped).
    pub duplicates: u64,
    /// Gaps opened (a frame or heartbeat beyond the highest position seen).
    pub gaps_detected: u64,
    /// NAK frames sent (first NAKs and retries).
    pub naks_sent: u64,
    /// NAKs sent again because the repair did not arrive.
    pub nak_retries: u64,
    /// NAKs of ours held back because another receiver's NAK was seen.
    pub naks_suppressed: u64,
    /// `Lost` events.
    pub lost_events: u64,
    /// Bytes of stream reported lost.
    pub lost_bytes: u64,
    /// Datagrams or frames dropped as invalid (the sum of `invalid_by`).
    pub invalid: u64,
    /// The same, by reason.
    pub invalid_by: InvalidCounts,
    /// Frames of a session or stream not being received.
    pub other_session: u64,
    /// Frames beyond the window (dropped, NAKed later).
    pub window_overruns: u64,
    /// Partial messages dropped (a fragment was lost).
    pub reassembly_dropped: u64,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// STATUS frames sent.
    pub status_sent: u64,
    /// Frames of the joined session from another source than the one it
    /// was set up from, and (unicast) whole datagrams from another source
    /// while a session is live: dropped unread.
    pub frames_foreign: u64,
}
