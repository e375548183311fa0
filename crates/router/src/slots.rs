//! Slot vectors: items kept at stable indices, a freed index reused.

/// Puts `item` in the slot `free` names last, or in a new one at the end;
/// its index.
pub(crate) fn put<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<u32>, item: T) -> u32 {
    match free.pop() {
        Some(i) => {
            slots[i as usize] = Some(item);
            i
        }
        None => {
            slots.push(Some(item));
            slots.len() as u32 - 1
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_freed_slot_is_reused_before_the_vector_grows() {
        let (mut slots, mut free) = (Vec::new(), Vec::new());
        assert_eq!((super::put(&mut slots, &mut free, 'a'), super::put(&mut slots, &mut free, 'b')), (0, 1));
        slots[0] = None;
        free.push(0);
        assert_eq!(super::put(&mut slots, &mut free, 'c'), 0);
        assert_eq!(super::put(&mut slots, &mut free, 'd'), 2);
        assert_eq!(slots, vec![Some('c'), Some('b'), Some('d')]);
    }
}
