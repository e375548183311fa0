//! Numbers with suffixes: sizes (`64`, `64k`, `64KiB`, `16MiB`; k/M/G are
//! binary), rates (`100k`, `1M`, `2.5M`; decimal), durations (`100us`,
//! `5s`, `2m`, via humantime). The parsers the lab's options share are the
//! lab's ([`tickwire_lab::base::common`]); the limits of the CLI's own
//! options are here.

pub use tickwire_lab::base::common::{parse_duration, parse_rate, parse_size};

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
