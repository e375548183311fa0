//! Reassembly and delivery: frames in, whole messages and loss notices out
//! to a handler. The one implementation behind the shared-memory log reader
//! and the network receiver.

use crate::{flags, DataFrame, DeliveryStats, Event, Message};

/// What a fragment did to the message being reassembled.
enum Step {
    /// More fragments are needed.
    Pending,
    /// The message is complete in the buffer.
    Complete,
    /// The fragment did not fit (missing BEGIN, or over `max`): the partial
    /// message was dropped.
    Dropped,
}

/// Turns a stream's DATA frames, in order, into [`Event`]s: an unfragmented
/// frame is delivered in place (zero-copy); BEGIN .. END fragments are
/// collected into one buffer bounded by `max` bytes and delivered whole; a
/// partial message interrupted by a loss or a new BEGIN is dropped and
/// counted, never delivered torn.
#[derive(Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    topic: String,
    start: u64,
    active: bool,
    max: usize,
    session_id: u32,
    stream_id: u32,
}

impl Reassembler {
    /// A reassembler for one session's stream, for messages of at most `max`
    /// bytes (memory grows to `max`, never beyond).
    pub fn new(session_id: u32, stream_id: u32, max: usize) -> Self {
        Self { buf: Vec::new(), topic: String::new(), start: 0, active: false, max, session_id, stream_id }
    }

    /// Forgets a partial message; counts it as dropped if one existed.
    #[inline]
    fn reset(&mut self, stats: &mut DeliveryStats) {
        if std::mem::replace(&mut self.active, false) {
            stats.reassembly_dropped += 1;
        }
    }

    /// Delivers the DATA frame found at stream `position` (the caller has
    /// checked it and placed it in order): a whole message goes to
    /// `handler`, a fragment is kept until its END. Returns whether a
    /// message was delivered.
    #[inline]
    pub fn on_frame<F: FnMut(Event<'_>)>(
        &mut self,
        frame: &DataFrame<&[u8]>,
        position: u64,
        stats: &mut DeliveryStats,
        handler: &mut F,
    ) -> bool {
        let fl = frame.flags();
        if fl & flags::UNFRAGMENTED == flags::UNFRAGMENTED {
            self.reset(stats);
            let payload = frame.payload();
            stats.messages += 1;
            stats.bytes += payload.len() as u64;
            handler(Event::Message(Message {
                payload,
                topic: frame.topic(),
                position,
                session_id: self.session_id,
                stream_id: self.stream_id,
            }));
            return true;
        }
        if fl & flags::BEGIN != 0 {
            self.reset(stats);
        }
        match self.push(fl, frame.topic(), frame.payload(), position) {
            Step::Pending => false,
            Step::Dropped => {
                stats.reassembly_dropped += 1;
                false
            }
            Step::Complete => {
                stats.messages += 1;
                stats.bytes += self.buf.len() as u64;
                handler(Event::Message(Message {
                    payload: &self.buf,
                    topic: &self.topic,
                    position: self.start,
                    session_id: self.session_id,
                    stream_id: self.stream_id,
                }));
                true
            }
        }
    }

    /// Reports stream bytes `[from, to)` as lost: drops any partial message
    /// and tells `handler`.
    #[inline]
    pub fn on_lost<F: FnMut(Event<'_>)>(&mut self, from: u64, to: u64, stats: &mut DeliveryStats, handler: &mut F) {
        self.reset(stats);
        stats.lost_events += 1;
        stats.lost_bytes += to - from;
        handler(Event::Lost { session_id: self.session_id, from, to });
    }

    fn push(&mut self, fl: u8, topic: &str, payload: &[u8], position: u64) -> Step {
        if fl & flags::BEGIN != 0 {
            self.buf.clear();
            self.topic.clear();
            self.topic.push_str(topic);
            self.start = position;
            self.active = true;
        } else if !self.active {
            return Step::Dropped;
        }
        if self.buf.len() + payload.len() > self.max {
            self.active = false;
            return Step::Dropped;
        }
        self.buf.extend_from_slice(payload);
        if fl & flags::END != 0 {
            self.active = false;
            return Step::Complete;
        }
        Step::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{BEGIN, END, UNFRAGMENTED};
    use crate::DataRepr;

    fn frame(buf: &mut [u8; 64], fl: u8, topic: &str, payload: &[u8]) -> usize {
        DataRepr { session_id: 3, stream_id: 4, position: 0, flags: fl, topic, payload }.emit(buf).unwrap()
    }

    fn feed(r: &mut Reassembler, fl: u8, topic: &str, payload: &[u8], pos: u64, st: &mut DeliveryStats) -> Vec<String> {
        let mut b = [0u8; 64];
        let n = frame(&mut b, fl, topic, payload);
        let f = DataFrame::new_checked(&b[..n]).unwrap();
        let mut out = Vec::new();
        r.on_frame(&f, pos, st, &mut |e: Event<'_>| {
            if let Event::Message(m) = e {
                out.push(format!("{}:{}@{}/{}", m.topic, String::from_utf8_lossy(m.payload), m.position, m.session_id))
            }
        });
        out
    }

    #[test]
    fn joins_fragments_and_drops_orphans_oversize_and_interrupted_messages() {
        let mut r = Reassembler::new(3, 4, 8);
        let mut st = DeliveryStats::default();
        assert!(feed(&mut r, 0, "", b"xx", 0, &mut st).is_empty(), "orphan");
        assert_eq!(st.reassembly_dropped, 1);
        assert!(feed(&mut r, BEGIN, "t", b"abc", 64, &mut st).is_empty());
        assert!(feed(&mut r, 0, "", b"de", 128, &mut st).is_empty());
        assert_eq!(feed(&mut r, END, "", b"f", 192, &mut st), vec!["t:abcdef@64/3"]);
        assert!(feed(&mut r, BEGIN, "", b"12345", 0, &mut st).is_empty());
        assert!(feed(&mut r, END, "", b"6789", 0, &mut st).is_empty(), "over max");
        assert_eq!(st.reassembly_dropped, 2);
        assert!(feed(&mut r, BEGIN, "", b"1", 0, &mut st).is_empty());
        assert_eq!(feed(&mut r, UNFRAGMENTED, "u", b"whole", 256, &mut st), vec!["u:whole@256/3"]);
        assert_eq!(st.reassembly_dropped, 3, "the interrupted partial message");
        assert!(feed(&mut r, BEGIN, "", b"1", 0, &mut st).is_empty());
        let mut lost = None;
        r.on_lost(320, 384, &mut st, &mut |e: Event<'_>| {
            if let Event::Lost { session_id, from, to } = e {
                lost = Some((session_id, from, to));
            }
        });
        assert_eq!(lost, Some((3, 320, 384)));
        assert_eq!((st.reassembly_dropped, st.lost_events, st.lost_bytes, st.messages, st.bytes), (4, 1, 64, 2, 11));
    }
}
