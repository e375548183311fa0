//! Ethernet, IPv4 and UDP headers: written for every datagram sent through
//! the AF_XDP socket, and checked on every frame received from it (the frame
//! came from the wire: untrusted).
//!
//! Pure functions on byte slices, no I/O: unit-tested and fuzzed.
//!
//! # Checksums
//! Sent datagrams carry a full IPv4 header checksum and a full UDP checksum
//! (copy mode has no checksum offload). Received ones are checked by
//! [`Checksum`] policy. On veth a kernel sender's UDP checksum is often left
//! *partial* (`CHECKSUM_PARTIAL`: the offload that never happens on a
//! virtual link leaves only the pseudo-header sum in the field), which a full
//! check would reject; [`Checksum::Verify`] recognises exactly that value,
//! accepts it and counts it.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Ethernet + IPv4 (no options) + UDP.
pub const HEADERS: usize = 14 + 20 + 8;
const ETH_P_IP: u16 = 0x0800;
const IPPROTO_UDP: u8 = 17;

/// What a received UDP checksum must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checksum {
    /// A full checksum must verify; a partial one (the pseudo-header sum a
    /// veth peer's `CHECKSUM_PARTIAL` leaves) is accepted and counted; zero
    /// means none (IPv4 allows it).
    #[default]
    Verify,
    /// A full checksum must verify; partial ones are dropped (for NICs that
    /// complete offloaded checksums).
    Strict,
    /// UDP checksums are not checked (the IPv4 header's still is).
    Skip,
}

impl std::str::FromStr for Checksum {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "verify" => Ok(Self::Verify),
            "strict" => Ok(Self::Strict),
            "skip" => Ok(Self::Skip),
            _ => Err(format!("{s:?} is not verify, strict or skip")),
        }
    }
}

/// Why a received frame is not a datagram for us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not IPv4/UDP, IP options, a fragment, or lengths that do not add up.
    Malformed,
    /// The IPv4 header or UDP checksum is wrong.
    Checksum,
}

/// A datagram taken out of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    /// Its source.
    pub from: SocketAddrV4,
    /// Its destination.
    pub to: SocketAddrV4,
    /// The UDP payload.
    pub payload: &'a [u8],
    /// Its UDP checksum was partial (accepted under [`Checksum::Verify`]).
    pub partial_checksum: bool,
}

/// The addresses of one flow's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination MAC (the next hop's, or the group's).
    pub dst_mac: [u8; 6],
    /// Our interface's MAC.
    pub src_mac: [u8; 6],
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
}

/// The Ethernet address of an IPv4 multicast group (01:00:5e + low 23 bits).
pub fn multicast_mac(group: Ipv4Addr) -> [u8; 6] {
    let o = group.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// Adds `data` to a ones'-complement sum as 16-bit big-endian words.
fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, udp_len: u16) -> u32 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    acc + u32::from(IPPROTO_UDP) + u32::from(udp_len)
}

/// Fills in the checksum of a 20-byte IPv4 header (bytes 10..12).
pub fn set_ipv4_checksum(ip: &mut [u8]) {
    ip[10..12].fill(0);
    let ip_sum = !fold(sum(0, &ip[..20]));
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
}

/// Writes the headers and `payload` into `frame`; returns the frame's
/// length, or `None` if it does not fit.
pub fn write(frame: &mut [u8], route: &Route, ip_id: u16, payload: &[u8]) -> Option<usize> {
    let len = HEADERS + payload.len();
    let udp_len = u16::try_from(8 + payload.len()).ok()?;
    if len > frame.len() || usize::from(udp_len) + 20 > usize::from(u16::MAX) {
        return None;
    }
    let f = &mut frame[..len];
    f[0..6].copy_from_slice(&route.dst_mac);
    f[6..12].copy_from_slice(&route.src_mac);
    f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&(udp_len + 20).to_be_bytes());
    ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
    ip[8] = if route.dst.ip().is_multicast() { 1 } else { 64 };
    ip[9] = IPPROTO_UDP;
    ip[12..16].copy_from_slice(&route.src.ip().octets());
    ip[16..20].copy_from_slice(&route.dst.ip().octets());
    set_ipv4_checksum(ip);
    let udp = &mut f[34..];
    udp[0..2].copy_from_slice(&route.src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&route.dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].fill(0);
    udp[8..].copy_from_slice(payload);
    let mut csum = !fold(sum(pseudo_header(*route.src.ip(), *route.dst.ip(), udp_len), udp));
    if csum == 0 {
        csum = 0xffff; // zero means "no checksum"
    }
    udp[6..8].copy_from_slice(&csum.to_be_bytes());
    Some(len)
}

/// Where a frame claims to go (IPv4 destination and UDP port), before
/// anything is checked: enough to choose whose checks [`read`] applies.
pub fn destination(frame: &[u8]) -> Option<SocketAddrV4> {
    if frame.len() < HEADERS || frame[12..14] != ETH_P_IP.to_be_bytes() {
        return None;
    }
    Some(SocketAddrV4::new(
        Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]),
        u16::from_be_bytes([frame[36], frame[37]]),
    ))
}

/// Checks a received frame and takes its UDP datagram out.
///
/// # Errors
/// [`Reject`] says why the frame is not one.
pub fn read(frame: &[u8], policy: Checksum) -> Result<Received<'_>, Reject> {
    if frame.len() < HEADERS || frame[12..14] != ETH_P_IP.to_be_bytes() {
        return Err(Reject::Malformed);
    }
    let ip = &frame[14..34];
    if ip[0] != 0x45 || ip[9] != IPPROTO_UDP || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return Err(Reject::Malformed);
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < 28 || 14 + total > frame.len() {
        return Err(Reject::Malformed);
    }
    if fold(sum(0, ip)) != 0xffff {
        return Err(Reject::Checksum);
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let udp = &frame[34..14 + total];
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]);
    if usize::from(udp_len) != udp.len() {
        return Err(Reject::Malformed);
    }
    let field = u16::from_be_bytes([udp[6], udp[7]]);
    let mut partial = false;
    if field != 0 && policy != Checksum::Skip {
        let pseudo = pseudo_header(src, dst, udp_len);
        if fold(sum(pseudo, udp)) != 0xffff {
            // CHECKSUM_PARTIAL leaves the folded pseudo-header sum.
            partial = policy == Checksum::Verify && field == fold(pseudo);
            if !partial {
                return Err(Reject::Checksum);
            }
        }
    }
    Ok(Received {
        from: SocketAddrV4::new(src, u16::from_be_bytes([udp[0], udp[1]])),
        to: SocketAddrV4::new(dst, u16::from_be_bytes([udp[2], udp[3]])),
        payload: &udp[8..],
        partial_checksum: partial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn route() -> Route {
        Route {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.0.1:4000".parse().unwrap(),
            dst: "10.0.0.2:5000".parse().unwrap(),
        }
    }

    /// A frame built by hand from RFC 768/791 arithmetic: the checksums
    /// match the ones computed independently below.
    #[test]
    fn headers_match_a_known_frame() {
        let mut f = [0u8; 64];
        let n = write(&mut f, &route(), 1, b"hi").unwrap();
        assert_eq!(n, HEADERS + 2);
        // IPv4 header checksum over 45 00 001e 0001 4000 4011 0000 0a000001 0a000002
        let words: [u32; 10] = [0x4500, 0x001e, 0x0001, 0x4000, 0x4011, 0, 0x0a00, 0x0001, 0x0a00, 0x0002];
        let s: u32 = words.iter().sum();
        let expect = !(((s & 0xffff) + (s >> 16)) as u16);
        assert_eq!(u16::from_be_bytes([f[24], f[25]]), expect);
        let r = read(&f[..n], Checksum::Strict).unwrap();
        assert_eq!((r.from, r.to, r.payload, r.partial_checksum), (route().src, route().dst, &b"hi"[..], false));
    }

    #[test]
    fn a_partial_checksum_is_accepted_only_under_verify() {
        let mut f = [0u8; 64];
        let n = write(&mut f, &route(), 1, b"payload").unwrap();
        let pseudo = fold(pseudo_header(*route().src.ip(), *route().dst.ip(), 15));
        f[40..42].copy_from_slice(&pseudo.to_be_bytes());
        assert!(read(&f[..n], Checksum::Verify).unwrap().partial_checksum);
        assert_eq!(read(&f[..n], Checksum::Strict), Err(Reject::Checksum));
        assert!(!read(&f[..n], Checksum::Skip).unwrap().partial_checksum);
        f[40] ^= 1; // neither full nor partial
        assert_eq!(read(&f[..n], Checksum::Verify), Err(Reject::Checksum));
        f[40..42].fill(0); // no checksum at all
        assert!(read(&f[..n], Checksum::Strict).is_ok());
    }

    #[test]
    fn fragments_options_and_short_lengths_are_malformed() {
        let mut f = [0u8; 64];
        let n = write(&mut f, &route(), 1, b"abc").unwrap();
        for (at, v) in [(14, 0x46u8), (20, 0x20), (23, 6), (12, 0x86)] {
            let mut g = f;
            g[at] = v;
            assert_eq!(read(&g[..n], Checksum::Skip), Err(Reject::Malformed), "byte {at} = {v:#x}");
        }
        assert_eq!(read(&f[..n - 1], Checksum::Skip), Err(Reject::Malformed), "IP length past the frame");
        assert_eq!(multicast_mac("239.129.2.3".parse().unwrap()), [1, 0, 0x5e, 1, 2, 3]);
    }

    proptest! {
        /// Every frame written reads back the same; any one flipped bit in
        /// the IP or UDP part is caught by a checksum or a length check.
        #[test]
        fn round_trip_and_single_bit_flips(payload in proptest::collection::vec(any::<u8>(), 0..1500), bit in 0usize..8 * 1600, id: u16) {
            let mut f = vec![0u8; 1600];
            let n = write(&mut f, &route(), id, &payload).unwrap();
            let r = read(&f[..n], Checksum::Strict).unwrap();
            prop_assert_eq!(r.payload, &payload[..]);
            let bit = 14 * 8 + bit % ((n - 14) * 8);
            f[bit / 8] ^= 1 << (bit % 8);
            let r = read(&f[..n], Checksum::Strict);
            // Unless the flip turned the UDP checksum into 0 ("none").
            let none = f[40] == 0 && f[41] == 0;
            prop_assert!(r.is_err() || none, "flipped bit {} read as {:?}", bit, r);
        }

        /// Valid frames with bytes overwritten, and cut short or padded:
        /// never a panic; what is accepted has lengths that add up (the
        /// IPv4 and UDP lengths agree, the payload lies inside the frame).
        #[test]
        fn mutated_frames_are_checked_not_trusted(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            edits in proptest::collection::vec((0usize..400, any::<u8>()), 1..6),
            cut in 0usize..400,
            policy in 0u8..3,
        ) {
            let policy = [Checksum::Verify, Checksum::Strict, Checksum::Skip][usize::from(policy)];
            let mut f = vec![0u8; 400];
            let n = write(&mut f, &route(), 7, &payload).unwrap();
            for (at, v) in edits {
                f[at % n] = v;
            }
            let len = cut.max(1).min(f.len());
            if let Ok(r) = read(&f[..len], policy) {
                let ip_total = usize::from(u16::from_be_bytes([f[16], f[17]]));
                let udp_len = usize::from(u16::from_be_bytes([f[38], f[39]]));
                prop_assert_eq!(ip_total, udp_len + 20);
                prop_assert_eq!(r.payload.len() + 8, udp_len);
                prop_assert!(14 + ip_total <= len);
            }
        }

        /// Any bytes at all: never a panic; what is accepted has lengths
        /// that add up (the payload lies inside the frame).
        #[test]
        fn arbitrary_frames_are_checked_not_trusted(frame in proptest::collection::vec(any::<u8>(), 0..200), policy in 0u8..3) {
            let policy = [Checksum::Verify, Checksum::Strict, Checksum::Skip][usize::from(policy)];
            if let Ok(r) = read(&frame, policy) {
                prop_assert!(HEADERS + r.payload.len() <= frame.len());
            }
        }
    }
}
