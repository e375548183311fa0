//! What the driver's integration tests share: a numbered message stream
//! whose every message can be checked on arrival.

/// Message `i`: its number (8 bytes, little endian), then `i % 251`
/// repeated, 8 to 3007 bytes long depending on `i`.
pub fn numbered(i: u64) -> Vec<u8> {
    let mut msg = vec![(i % 251) as u8; 8 + (i as usize * 37) % 3000];
    msg[..8].copy_from_slice(&i.to_le_bytes());
    msg
}

/// The number of a message made by [`numbered`]; panics if its length or
/// bytes are not what that number makes.
pub fn check_numbered(payload: &[u8]) -> u64 {
    let i = u64::from_le_bytes(payload[..8].try_into().unwrap());
    assert_eq!(payload.len(), 8 + (i as usize * 37) % 3000, "message {i}: length");
    assert!(payload[8..].iter().all(|&b| b == (i % 251) as u8), "message {i}: bytes");
    i
}
