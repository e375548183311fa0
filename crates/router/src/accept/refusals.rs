//! Refused connections, counted by reason, and logged at most once an
//! interval (a second) with the count since the last line: a flood of
//! connections past a limit, or an `accept` failing for lack of
//! descriptors a thousand times a second, is a line a second, not one per
//! connection. Sans-IO: the time is passed in.

use super::slots::Refusal;
use std::net::SocketAddr;

/// The refusals since start and since the last line, and when that was.
#[derive(Debug)]
pub struct RefusalLog {
    interval_ns: u64,
    /// When the last line was made (`None`: never).
    last_line: Option<u64>,
    /// Since start, by [`Refusal::index`].
    total: [u64; Refusal::ALL.len()],
    /// Since the last line.
    unlogged: [u64; Refusal::ALL.len()],
    /// The last refused peer since the last line, if known.
    last_peer: Option<SocketAddr>,
    /// The last `accept` error since the last line.
    last_error: Option<String>,
    /// What the limits were, for the line.
    max: usize,
    per_address: usize,
}

impl RefusalLog {
    /// A log making at most a line every `interval_ns`, naming the limits
    /// `max` (`limits.max_connections`) and `per_address`.
    pub fn new(interval_ns: u64, max: usize, per_address: usize) -> Self {
        Self {
            interval_ns,
            last_line: None,
            total: [0; Refusal::ALL.len()],
            unlogged: [0; Refusal::ALL.len()],
            last_peer: None,
            last_error: None,
            max,
            per_address,
        }
    }

    /// Counts one refusal of `peer` (if known; `error`: what `accept`
    /// said) at `now`; returns a line to log if one is due.
    pub fn refused(&mut self, why: Refusal, peer: Option<SocketAddr>, error: Option<&str>, now: u64) -> Option<String> {
        self.total[why.index()] += 1;
        self.unlogged[why.index()] += 1;
        if peer.is_some() {
            self.last_peer = peer;
        }
        if let Some(e) = error {
            self.last_error = Some(e.to_owned());
        }
        self.due(now)
    }

    /// Refusals since start, by [`Refusal::index`].
    pub fn totals(&self) -> [u64; Refusal::ALL.len()] {
        self.total
    }

    /// The line for the refusals not yet logged, if there are any and the
    /// last line is at least an interval old.
    pub fn due(&mut self, now: u64) -> Option<String> {
        let n: u64 = self.unlogged.iter().sum();
        if n == 0 || self.last_line.is_some_and(|t| now.saturating_sub(t) < self.interval_ns) {
            return None;
        }
        let since = match self.last_line {
            Some(t) => format!(" in the last {:.1} s", now.saturating_sub(t) as f64 / 1e9),
            None => String::new(),
        };
        let mut parts = Vec::new();
        for r in Refusal::ALL {
            let k = self.unlogged[r.index()];
            if k == 0 {
                continue;
            }
            parts.push(match r {
                Refusal::MaxConnections => format!("{k} at limits.max_connections ({})", self.max),
                Refusal::PerAddress => {
                    format!("{k} at limits.max_connections_per_address ({})", self.per_address)
                }
                Refusal::NoDescriptors => format!("{k} for lack of file descriptors (RLIMIT_NOFILE)"),
                Refusal::AcceptFailed => format!("{k} accept failures"),
            });
        }
        let mut line = format!("refused {n} connection(s){since}: {}", parts.join(", "));
        if let Some(p) = self.last_peer.take() {
            line.push_str(&format!("; the last from {p}"));
        }
        if let Some(e) = self.last_error.take() {
            line.push_str(&format!("; accept: {e}"));
        }
        self.unlogged = [0; Refusal::ALL.len()];
        self.last_line = Some(now);
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn peer() -> Option<SocketAddr> {
        "127.0.0.1:4000".parse().ok()
    }

    #[test]
    fn the_first_refusal_is_a_line_at_once_then_one_a_second_with_the_count() {
        let mut log = RefusalLog::new(S, 192, 4);
        let first = log.refused(Refusal::MaxConnections, peer(), None, 10 * S).unwrap();
        assert_eq!(first, "refused 1 connection(s): 1 at limits.max_connections (192); the last from 127.0.0.1:4000");
        // 1,000 refusals in the next second: no line until it has passed.
        let mut lines = Vec::new();
        for k in 0..1000u64 {
            let why = if k % 4 == 0 { Refusal::PerAddress } else { Refusal::NoDescriptors };
            lines.extend(log.refused(why, None, Some("Too many open files (os error 24)"), 10 * S + k * 1_000_000));
        }
        assert!(lines.is_empty(), "{lines:?}");
        let line = log.due(11 * S).unwrap();
        assert_eq!(
            line,
            "refused 1000 connection(s) in the last 1.0 s: 250 at limits.max_connections_per_address (4), \
             750 for lack of file descriptors (RLIMIT_NOFILE); accept: Too many open files (os error 24)"
        );
        assert_eq!(log.due(15 * S), None, "nothing new, nothing to say");
        assert_eq!(log.totals(), [1, 250, 750, 0]);
    }

    #[test]
    fn a_flood_makes_at_most_a_line_an_interval() {
        let mut log = RefusalLog::new(S, 10, 0);
        let mut lines = 0;
        // 20 s of a refusal every 100 us, checked every millisecond.
        for t in (0..20 * S).step_by(100_000) {
            lines += usize::from(log.refused(Refusal::AcceptFailed, None, Some("x"), t).is_some());
            if t % 1_000_000 == 0 {
                lines += usize::from(log.due(t).is_some());
            }
        }
        println!("20 s of 10,000 refusals a second: {lines} lines");
        assert!((20..=21).contains(&lines), "{lines}");
        assert_eq!(log.totals()[Refusal::AcceptFailed.index()], 200_000);
    }
}
