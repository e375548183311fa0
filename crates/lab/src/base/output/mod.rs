//! What a run prints and writes.
//!
//! * [`report`]: statistics from an HdrHistogram, the papers' table, JSON rows.
//! * [`print`](mod@print): the command's output in the chosen [`print::Format`].
//! * [`plots`]: SVG plots (latency against size or rate, percentiles).
//! * this module: the formats besides the table and JSON: CSV, HdrHistogram
//!   interval logs (readable by HdrHistogram's tools and the `hdrhistogram`
//!   Python package), and sockperf's percentile block (so existing scripts work).

pub mod plots;
pub mod print;
pub mod report;

use crate::base::output::report::LatencyRow;
use crate::LabError;
use base64::Engine;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer, V2Serializer};
use hdrhistogram::Histogram;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// A row and the histogram it was computed from.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The statistics.
    pub row: LatencyRow,
    /// The distribution.
    pub hist: Histogram<u64>,
    /// When recording started (for interval logs).
    pub start: SystemTime,
    /// How long recording took.
    pub elapsed: Duration,
}

/// CSV columns, in order.
pub const CSV_COLUMNS: [&str; 26] = [
    "mode",
    "transport",
    "probe",
    "wait",
    "size",
    "count",
    "min_ns",
    "p50_ns",
    "mean_ns",
    "p90_ns",
    "p99_ns",
    "p999_ns",
    "p9999_ns",
    "max_ns",
    "std_ns",
    "offered_rate",
    "achieved_rate",
    "lost",
    "floor_p50_ns",
    "floor_p999_ns",
    "ratio_p50",
    "ratio_p999",
    "clock",
    "cpus",
    "machine",
    "tag",
];

fn csv_field(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) if s.contains([',', '"', '\n']) => format!("\"{}\"", s.replace('"', "\"\"")),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The tag naming a row in an interval log: `mode-transport[-wait]-size`.
pub fn tag(row: &LatencyRow) -> String {
    let mut t = format!("{}-{}", row.mode, row.probe.as_deref().unwrap_or(&row.transport));
    if let Some(w) = &row.wait {
        t.push('-');
        t.push_str(w);
    }
    t.push_str(&format!("-{}", row.size));
    t
}

/// Rows as CSV with a header line.
pub fn csv(rows: &[LatencyRow]) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("tag".into(), tag(r).into());
        }
        let line: Vec<String> = CSV_COLUMNS.iter().map(|c| csv_field(&v[*c])).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// Writes an HdrHistogram V2 interval log with one tagged interval per row
/// (values in nanoseconds; the max column in seconds).
///
/// # Errors
/// I/O or serialization errors, as text.
pub fn write_hlog(path: &Path, measured: &[Measured]) -> Result<(), String> {
    let base = measured.first().map_or(SystemTime::now(), |m| m.start);
    let mut buf = Vec::new();
    {
        let mut ser = V2DeflateSerializer::new();
        let mut builder = IntervalLogWriterBuilder::new();
        builder
            .add_comment("tickwire lab: half-round-trip latency in nanoseconds")
            .with_start_time(base)
            .with_base_time(base)
            .with_max_value_divisor(1e9);
        let mut w = builder.begin_log_with(&mut buf, &mut ser).map_err(|e| e.to_string())?;
        for m in measured {
            let t = tag(&m.row);
            let start = m.start.duration_since(base).unwrap_or_default();
            w.write_histogram(&m.hist, start, m.elapsed, Tag::new(&t)).map_err(|e| format!("{e:?}"))?;
        }
    }
    std::fs::write(path, buf).map_err(|e| format!("{}: {e}", path.display()))
}

/// sockperf's latency block (microseconds, three decimals).
pub fn sockperf(m: &Measured) -> String {
    let h = &m.hist;
    let us = |ns: u64| ns as f64 / 1000.0;
    let mut s = String::new();
    s.push_str(&format!("sockperf: ====> avg-latency={:.3} (std-dev={:.3})\n", h.mean() / 1000.0, h.stdev() / 1000.0));
    s.push_str(&format!(
        "sockperf: # dropped messages = {}; # duplicated messages = 0; # out-of-order messages = 0\n",
        m.row.lost
    ));
    s.push_str(&format!("sockperf: Summary: Latency is {:.3} usec\n", h.mean() / 1000.0));
    s.push_str(&format!(
        "sockperf: Total {} observations; each percentile contains {:.2} observations\n",
        h.len(),
        h.len() as f64 / 100.0
    ));
    s.push_str(&format!("sockperf: ---> <MAX> observation = {:>8.3}\n", us(h.max())));
    for p in [99.999, 99.99, 99.9, 99.0, 90.0, 75.0, 50.0, 25.0] {
        s.push_str(&format!("sockperf: ---> percentile {p:>6.3} = {:>8.3}\n", us(h.value_at_quantile(p / 100.0))));
    }
    s.push_str(&format!("sockperf: ---> <MIN> observation = {:>8.3}\n", us(h.min())));
    s
}

/// Serializes a histogram for the trip from the worker (V2, base64).
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    let _ = V2Serializer::new().serialize(h, &mut buf);
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Reads what [`encode_histogram`] wrote.
///
/// # Errors
/// [`LabError::Worker`] if it is not a histogram.
pub fn decode_histogram(s: &str) -> Result<Histogram<u64>, LabError> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| LabError::Worker(format!("histogram encoding: {e}")))?;
    Deserializer::new().deserialize(&mut raw.as_slice()).map_err(|e| LabError::Worker(format!("histogram: {e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::output::report::histogram;

    fn sample() -> Measured {
        let mut h = histogram();
        for v in [1000u64, 2000, 3000, 4000] {
            h.record(v).unwrap();
        }
        let mut row = LatencyRow::from_histogram("pingpong", "udp", 64, &h);
        row.wait = Some("spin".into());
        row.machine = "cpu, with a comma".into();
        Measured { row, hist: h, start: SystemTime::now(), elapsed: Duration::from_secs(1) }
    }

    #[test]
    fn csv_has_a_header_and_quotes_commas() {
        let m = sample();
        let c = csv(std::slice::from_ref(&m.row));
        let lines: Vec<_> = c.lines().collect();
        assert_eq!(lines[0].split(',').count(), CSV_COLUMNS.len());
        assert!(lines[1].starts_with("pingpong,udp,,spin,64,4,"));
        assert!(lines[1].contains("\"cpu, with a comma\""));
        assert!(lines[1].ends_with(",pingpong-udp-spin-64"));
    }

    #[test]
    fn sockperf_block_matches_its_format() {
        let s = sockperf(&sample());
        assert!(s.contains("sockperf: ---> percentile 50.000 =    2.000"), "{s}");
        // HdrHistogram keeps 3 significant digits: 4000 ns reads back as 4.003 us.
        assert!(s.contains("sockperf: ---> <MAX> observation =    4.00"), "{s}");
        assert!(s.contains("Total 4 observations"));
    }

    #[test]
    fn hlog_round_trips_through_the_hdrhistogram_reader() {
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        use hdrhistogram::serialization::Deserializer;
        let m = sample();
        let path = std::env::temp_dir().join(format!("tw-hlog-{}.hlog", std::process::id()));
        write_hlog(&path, std::slice::from_ref(&m)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut found = 0;
        for entry in IntervalLogIterator::new(&bytes) {
            if let Ok(LogEntry::Interval(i)) = entry {
                assert_eq!(i.tag().unwrap().as_str(), "pingpong-udp-spin-64");
                let raw = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> = Deserializer::new().deserialize(&mut raw.as_slice()).unwrap();
                assert_eq!(h.len(), 4);
                assert_eq!(h.max(), m.hist.max());
                found += 1;
            }
        }
        assert_eq!(found, 1);
        let _ = std::fs::remove_file(path);
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(s).unwrap()
    }
}
