//! Numbers with suffixes: sizes (`64`, `64k`, `64KiB`, `16MiB`; k/M/G are
//! binary), rates (`100k`, `1M`, `2.5M`; decimal), durations (`100us`,
//! `5s`, `2m`, via humantime).

use std::time::Duration;
use tickwire_driver::units::SizeError;

/// Parses a byte size. `k`, `K`, `KB`, `KiB` all mean 1024.
///
/// # Errors
/// A message naming the bad input.
pub fn parse_size(s: &str) -> Result<usize, String> {
    tickwire_driver::units::parse_size(s).map_err(|e| match e {
        SizeError::Number => format!("bad size {s:?}: expected e.g. 64, 64k, 16MiB"),
        SizeError::Unit => format!("bad size unit in {s:?}: use k, M, G (KiB, MiB, GiB)"),
        SizeError::Overflow => format!("size {s:?} overflows"),
    })
}

/// Parses a rate in messages per second: `100k` = 100,000; `1M` = 1,000,000.
///
/// # Errors
/// A message naming the bad input.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("/s");
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad rate {s:?}: expected e.g. 100k, 1M"))?;
    let mult = match unit {
        "" => 1e0,
        "k" | "K" => 1e3,
        "m" | "M" => 1e6,
        "g" | "G" => 1e9,
        _ => return Err(format!("bad rate unit in {s:?}: use k, M, G")),
    };
    let v = n * mult;
    if !v.is_finite() || !(1.0..=1e12).contains(&v) {
        return Err(format!("rate {s:?} out of range"));
    }
    Ok(v.round() as u64)
}

/// Parses a duration: `100us`, `5s`, `1m30s`.
///
/// # Errors
/// A message naming the bad input.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    tickwire_driver::units::parse_duration(s).map_err(|e| format!("bad duration {s:?}: {e} (e.g. 100us, 5s)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_errors_name_the_input() {
        // The parser itself is tested in tickwire_driver::units; here, the messages.
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert!(parse_size("12q").unwrap_err().contains("bad size unit in \"12q\""));
        assert!(parse_size("").unwrap_err().contains("expected e.g. 64"));
        assert!(parse_size("999999999999G").unwrap_err().contains("overflows"));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100k"), Ok(100_000));
        assert_eq!(parse_rate("1M"), Ok(1_000_000));
        assert_eq!(parse_rate("2.5M"), Ok(2_500_000));
        assert_eq!(parse_rate("500"), Ok(500));
        assert_eq!(parse_rate("1.5k"), Ok(1_500), "decimal with a suffix");
        assert_eq!(parse_rate("1.5k/s"), Ok(1_500));
        assert!(parse_rate("1.5x").unwrap_err().contains("use k, M, G"));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn duration_errors_name_the_input() {
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert!(parse_duration("5 parsecs").unwrap_err().contains("bad duration \"5 parsecs\""));
    }
}
