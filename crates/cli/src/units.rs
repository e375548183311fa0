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

/// The longest duration any option takes (a year): longer ones would
/// overflow a deadline (`now + duration`) and are surely a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a duration: `100us`, `5s`, `1m30s`; at most [`MAX_DURATION`].
///
/// # Errors
/// A message naming the bad input.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d =
        tickwire_driver::units::parse_duration(s).map_err(|e| format!("bad duration {s:?}: {e} (e.g. 100us, 5s)"))?;
    if d > MAX_DURATION {
        return Err(format!("duration {s:?} is over the limit of 365 days"));
    }
    Ok(d)
}

/// The largest message a publication takes (the default log's
/// `max_message`; UDP fragments up to the same size).
pub const MAX_MESSAGE: usize = 4 << 20;

/// Parses a message size: [`parse_size`] within `min..=`[`MAX_MESSAGE`].
///
/// # Errors
/// A message naming the input and the limits.
pub fn parse_message_size(s: &str, min: usize) -> Result<usize, String> {
    let v = parse_size(s)?;
    if !(min..=MAX_MESSAGE).contains(&v) {
        return Err(format!("message size {s:?} out of range: {min} B to 4 MiB (the largest message)"));
    }
    Ok(v)
}

/// Parses a log capacity: a power of two from 64 KiB to 1 TiB.
///
/// # Errors
/// A message naming the input and the limits.
pub fn parse_capacity(s: &str) -> Result<usize, String> {
    let v = parse_size(s)?;
    if !v.is_power_of_two() || !(64 << 10..=1 << 40).contains(&v) {
        return Err(format!("capacity {s:?}: use a power of two from 64KiB to 1TiB, e.g. 16MiB"));
    }
    Ok(v)
}

/// Parses an MTU: a multiple of 32 from 64 B to 16 MiB.
///
/// # Errors
/// A message naming the input and the limits.
pub fn parse_mtu(s: &str) -> Result<usize, String> {
    let v = parse_size(s)?;
    if v % 32 != 0 || !(64..=16 << 20).contains(&v) {
        return Err(format!("mtu {s:?}: use a multiple of 32 from 64 to 16MiB, e.g. 64k"));
    }
    Ok(v)
}

/// Parses a pair of CPUs `LOCAL,REMOTE` for the two spinning sides of a
/// measurement and checks that this process may run on both (the CPUs of
/// its affinity mask: those that exist and its cgroup's cpuset allows).
///
/// # Errors
/// A message naming the CPU and listing the allowed ones.
pub fn parse_cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or_else(|| format!("bad CPU list {s:?}: expected two CPUs, e.g. 0,1"))?;
    let allowed = tickwire_agent::allowed_cpus();
    let cpu = |x: &str| -> Result<usize, String> {
        let c = x.trim().parse::<usize>().map_err(|_| format!("bad CPU {x:?} in {s:?}: expected e.g. 0,1"))?;
        if !allowed.contains(&c) {
            return Err(format!(
                "CPU {c} does not exist or is not allowed for this process (allowed: {})",
                tickwire_agent::cpu_list(&allowed)
            ));
        }
        Ok(c)
    };
    Ok((cpu(a)?, cpu(b)?))
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
