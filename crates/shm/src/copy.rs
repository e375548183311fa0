//! Copies of message bytes into a mapping, shared by the log's appender and
//! the floor rings so that both copy the same way, and the stamp the lab's
//! streams write into each message before it is copied.

/// `copy_nonoverlapping` with the sizes from 8 to 32 bytes copied inline, in
/// at most two overlapping moves, instead of by a call to `memcpy`: the call
/// and its return address are stores too, and a message's stores wait in
/// order behind the line a caught-up subscriber holds.
///
/// # Safety
/// As `copy_nonoverlapping(src, dst, len)`.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: in every arm, each move reads and writes inside [src, src+len)
    // and [dst, dst+len), which the caller guarantees valid and disjoint;
    // the moves are unaligned.
    unsafe {
        match len {
            0 => {}
            1..=7 => std::ptr::copy_nonoverlapping(src, dst, len),
            8..=16 => {
                let (a, b) = (src.cast::<u64>().read_unaligned(), src.add(len - 8).cast::<u64>().read_unaligned());
                dst.cast::<u64>().write_unaligned(a);
                dst.add(len - 8).cast::<u64>().write_unaligned(b);
            }
            17..=32 => {
                let (a, b) = (src.cast::<u128>().read_unaligned(), src.add(len - 16).cast::<u128>().read_unaligned());
                dst.cast::<u128>().write_unaligned(a);
                dst.add(len - 16).cast::<u128>().write_unaligned(b);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// Writes the sequence number a streamed message carries into its first
/// bytes, for the lab's streams (the floors and tickwire's row alike): as one
/// 16-byte store when the message has room (bytes 8..16 zero), so that the
/// copy which follows, whose first move reads those 16 bytes, takes them
/// from the store buffer. An 8-byte store (or two) under a 16-byte load
/// defeats store-to-load forwarding: the load then waits for every earlier
/// store to reach the cache, which puts each message behind the line
/// transfer of the one before it. The loads line up with this store at 16
/// and 32 bytes (32 B is the size IPC throughput is judged at); at 17 to 31
/// bytes the copy's second load still straddles it, and above 32 `memcpy`
/// loads 32 bytes at once. (The stamp's layout is `tickwire_wire::stamp`'s;
/// this writes only its sequence.)
#[inline(always)]
pub fn stamp_sequence(msg: &mut [u8], seq: u64) {
    #[cfg(target_arch = "x86_64")]
    if msg.len() >= 16 {
        use std::arch::x86_64::{_mm_set_epi64x, _mm_storeu_si128};
        // SAFETY: SSE2 is part of x86_64; the store writes msg[..16], which
        // exists (checked above); `storeu` needs no alignment.
        unsafe { _mm_storeu_si128(msg.as_mut_ptr().cast(), _mm_set_epi64x(0, seq as i64)) };
        return;
    }
    msg[..8].copy_from_slice(&seq.to_le_bytes());
    if msg.len() >= 16 {
        msg[8..16].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, stamp_sequence};

    #[test]
    fn every_length_up_to_and_past_the_inline_sizes_copies_exactly_its_bytes() {
        let src: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
        for len in 0..=100 {
            for at in [0, 1, 7, 8, 31] {
                let mut dst = vec![0xEEu8; 160];
                // SAFETY: src has 200 bytes and dst 160 >= at + len; distinct vectors.
                unsafe { copy_bytes(src.as_ptr().add(3), dst.as_mut_ptr().add(at), len) };
                assert_eq!(&dst[at..at + len], &src[3..3 + len], "len {len} at {at}");
                assert!(
                    dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0xEE),
                    "len {len} at {at}: wrote outside"
                );
            }
        }
    }

    #[test]
    fn a_stamped_message_carries_its_sequence_first_and_keeps_the_rest() {
        for len in [8usize, 15, 16, 17, 32, 64] {
            let mut msg = vec![0xAAu8; len];
            stamp_sequence(&mut msg, 0x0102_0304_0506_0708);
            assert_eq!(msg[..8], 0x0102_0304_0506_0708u64.to_le_bytes(), "len {len}");
            let zeroed = if len >= 16 { 16 } else { 8 };
            assert!(msg[8..zeroed].iter().all(|&b| b == 0), "len {len}: bytes 8..16 zero");
            assert!(msg[zeroed..].iter().all(|&b| b == 0xAA), "len {len}: the rest untouched");
        }
    }
}
