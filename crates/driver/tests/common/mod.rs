//! What the driver's integration tests share: a numbered message stream
//! whose every message can be checked on arrival (the testkit's pattern,
//! at lengths that make the larger messages span several frames).

/// The length of message `i`: 8 to 3007 bytes.
fn length(i: u64) -> usize {
    8 + (i as usize * 37) % 3000
}

/// Message `i`: its number, then the testkit's pattern for it.
pub fn numbered(i: u64) -> Vec<u8> {
    let mut msg = Vec::new();
    tickwire_testkit::pattern(i, length(i), &mut msg);
    msg
}

/// The number of a message made by [`numbered`]; panics if its bytes or
/// its length are not what that number makes.
pub fn check_numbered(payload: &[u8]) -> u64 {
    let i = tickwire_testkit::check(payload).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payload.len(), length(i), "message {i}: length");
    i
}
