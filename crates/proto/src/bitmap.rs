//! A ring bitmap: one bit per 32-byte slot of a power-of-two ring.

/// Bits indexed modulo `len` (a power of two, at least 64).
#[derive(Debug, Clone)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    mask: usize,
}

impl Bitmap {
    pub(crate) fn new(len: usize) -> Self {
        debug_assert!(len.is_power_of_two() && len >= 64);
        Self { words: vec![0; len / 64], mask: len - 1 }
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> bool {
        let i = i & self.mask;
        self.words[i / 64] >> (i % 64) & 1 == 1
    }

    #[inline]
    pub(crate) fn set(&mut self, i: usize, on: bool) {
        let i = i & self.mask;
        if on {
            self.words[i / 64] |= 1 << (i % 64);
        } else {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    pub(crate) fn set_range(&mut self, start: usize, n: usize, on: bool) {
        for k in 0..n {
            self.set(start + k, on);
        }
    }

    /// Offset `k < n` of the first bit from `start` that equals `want`.
    pub(crate) fn find(&self, start: usize, n: usize, want: bool) -> Option<usize> {
        let mut k = 0;
        while k < n {
            let i = (start + k) & self.mask;
            let word = if want { self.words[i / 64] } else { !self.words[i / 64] };
            let bits = word >> (i % 64);
            if bits != 0 {
                let hit = k + bits.trailing_zeros() as usize;
                return (hit < n).then_some(hit);
            }
            k += 64 - i % 64;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Bitmap;

    #[test]
    fn finds_across_words_and_the_wrap() {
        let mut b = Bitmap::new(256);
        assert_eq!(b.find(10, 256, true), None);
        assert_eq!(b.find(10, 256, false), Some(0));
        b.set_range(250, 10, true); // 250..256 and 0..4
        assert!(b.get(3) && b.get(251) && !b.get(4));
        assert_eq!(b.find(100, 256, true), Some(150));
        assert_eq!(b.find(252, 10, false), Some(8));
        assert_eq!(b.find(100, 150, true), None);
        b.set_range(250, 10, false);
        assert_eq!(b.find(0, 256, true), None);
    }
}
