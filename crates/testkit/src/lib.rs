//! Test support: message patterns shared by the `tw-testkit` helper binary
//! (the far side of multi-process tests) and the tests themselves.
//!
//! # Examples
//!
//! ```
//! let mut payload = Vec::new();
//! tickwire_testkit::pattern(42, 64, &mut payload);
//! assert_eq!(tickwire_testkit::check(&payload), Ok(42));
//! payload[40] ^= 1; // a torn byte
//! assert!(tickwire_testkit::check(&payload).is_err());
//! ```
#![forbid(unsafe_code)]

pub mod ca;

/// The payload of message `seq` with `len` bytes: the sequence number, then a
/// pattern derived from it, so any misplaced or torn byte is detected.
pub fn pattern(seq: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seq.to_le_bytes()[..len.min(8)]);
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
}

/// Checks a payload against [`pattern`]; returns its sequence number.
pub fn check(payload: &[u8]) -> Result<u64, String> {
    let Some(seq) = tickwire_wire::stamp::seq(payload) else {
        return Err(format!("payload of {} bytes is too short", payload.len()));
    };
    let mut want = Vec::with_capacity(payload.len());
    pattern(seq, payload.len(), &mut want);
    if want != payload {
        return Err(format!("message {seq}: payload does not match its pattern (torn or corrupt)"));
    }
    Ok(seq)
}

/// Length of message `seq` in a run with `size` (0 = varying 8..=300).
pub fn length(seq: u64, size: usize) -> usize {
    if size == 0 {
        8 + (seq.wrapping_mul(7919) % 293) as usize
    } else {
        size
    }
}

/// Writes a self-signed certificate for `localhost` (and its private key)
/// as `DIR/NAME.pem` and `DIR/NAME.key`, for TLS tests; returns both paths.
///
/// # Panics
/// If the certificate cannot be made or the files written (a test fails).
pub fn self_signed(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a self-signed certificate");
    std::fs::create_dir_all(dir).expect("the certificate's directory");
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cert, ck.cert.pem()).expect("the certificate file");
    std::fs::write(&key, ck.key_pair.serialize_pem()).expect("the key file");
    // A private key its owner's alone: the router refuses any other.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("the key's mode");
    (cert, key)
}

/// Sends `payload` as a UDP datagram that claims to come from `from`, through
/// a raw socket (needs CAP_NET_RAW): how a host on a shared network forges
/// another's source address. The IPv4 header is built here; the UDP checksum
/// is left 0 (allowed in IPv4).
///
/// # Errors
/// The socket's error (`PermissionDenied` without CAP_NET_RAW).
pub fn send_spoofed(from: std::net::SocketAddrV4, to: std::net::SocketAddrV4, payload: &[u8]) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    // IPPROTO_RAW: the caller writes the IP header (IP_HDRINCL implied).
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
    let total = 20 + 8 + payload.len();
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, libc::IPPROTO_UDP as u8, 0, 0]);
    p.extend_from_slice(&from.ip().octets());
    p.extend_from_slice(&to.ip().octets());
    let sum = !p.chunks(2).fold(0u32, |acc, c| {
        let acc = acc + u32::from(u16::from_be_bytes([c[0], c[1]]));
        (acc & 0xffff) + (acc >> 16)
    }) as u16;
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&from.port().to_be_bytes());
    p.extend_from_slice(&to.port().to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    s.send_to(&p, &SockAddr::from(to))?;
    Ok(())
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// Skips the calling test, visibly: writes `SKIPPED: TEST: WHY` to the real
/// standard error (not through `eprintln!`, which the test harness captures
/// and hides for a test that passes, so that a skip would read as "ok").
/// The caller returns right after.
///
/// # Panics
/// When the environment variable `CI` is set (to anything but empty,
/// `0` or `false`): CI runs as root with everything installed, so a
/// skip there is a failure.
pub fn skip(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let line = format!("SKIPPED: {test}: {why}\n");
    // One write of the whole line, so that parallel tests do not interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    let ci = std::env::var("CI").unwrap_or_default();
    assert!(
        matches!(ci.trim(), "" | "0" | "false"),
        "{test} was skipped under CI={ci} ({why}); CI must run every test"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_round_trips_and_detects_a_flipped_byte() {
        let mut v = Vec::new();
        pattern(42, 100, &mut v);
        assert_eq!(check(&v), Ok(42));
        v[50] ^= 1;
        assert!(check(&v).is_err());
    }

    #[test]
    fn skip_passes_outside_ci_and_fails_under_it() {
        // The only test of this binary that reads CI; it puts it back.
        let before = std::env::var_os("CI");
        std::env::remove_var("CI");
        skip("a skip outside CI is allowed");
        std::env::set_var("CI", "true");
        let under_ci = std::panic::catch_unwind(|| skip("a skip under CI is not"));
        match before {
            Some(v) => std::env::set_var("CI", v),
            None => std::env::remove_var("CI"),
        }
        assert!(under_ci.is_err(), "a skip under CI=true must fail the test");
    }
}
