//! Numbers with units, the one parser of each for the whole project:
//! channel URIs and the command line share them.

use std::time::Duration;

/// Why a size does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// No number, or not a whole number.
    Number,
    /// A suffix other than k, M, G (KiB, MiB, GiB, KB, MB, GB, B).
    Unit,
    /// Larger than `usize`.
    Overflow,
}

/// Parses `1408`, `64k`, `64KiB`, `16M`, `1G` (binary multiples). The one
/// size parser of the project: channel URIs and the command line share it.
///
/// # Errors
/// [`SizeError`] saying which part is wrong.
pub fn parse_size(v: &str) -> Result<usize, SizeError> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: usize = num.parse().map_err(|_| SizeError::Number)?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(SizeError::Unit),
    };
    n.checked_mul(mult).ok_or(SizeError::Overflow)
}

/// Parses a duration: `500ns`, `20us` (or `µs`), `1ms`, `2s`, `1m30s`.
///
/// # Errors
/// humantime's description of what is wrong.
pub fn parse_duration(v: &str) -> Result<Duration, humantime::DurationError> {
    let v = v.trim();
    match v.strip_suffix("µs") {
        Some(n) => humantime::parse_duration(&format!("{n}us")),
        None => humantime::parse_duration(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("12q"), Err(SizeError::Unit));
        assert_eq!(parse_size(""), Err(SizeError::Number));
        assert_eq!(parse_size("99999999999999999999G"), Err(SizeError::Number));
        assert_eq!(parse_size("999999999999G"), Err(SizeError::Overflow));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("20µs").unwrap(), Duration::from_micros(20));
        assert_eq!(parse_duration("500ns").unwrap(), Duration::from_nanos(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert!(parse_duration("5 parsecs").is_err());
    }
}
