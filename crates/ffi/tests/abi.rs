//! The C ABI's refusals, called from Rust as C would: NULL, a handle of
//! another type, a closed handle, a buffer too small, a timeout past the
//! clock's range. Each is a status code and a message, never a crash.

use std::ffi::{CStr, CString};
use tickwire::channel::*;
use tickwire::{tw_last_error, tw_status};

fn last() -> String {
    // SAFETY: tw_last_error never returns NULL, and the string lives until
    // this thread's next failure.
    unsafe { CStr::from_ptr(tw_last_error()) }.to_string_lossy().into_owned()
}

#[test]
fn misuse_is_a_status_code_with_a_message() {
    let dir = std::env::temp_dir().join(format!("tw-ffi-abi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_c = CString::new(dir.to_str().unwrap()).unwrap();
    let channel = CString::new("ipc:abi").unwrap();
    let (mut ctx, mut p, mut s) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: every pointer is this test's, valid, or NULL where the
    // function takes NULL; handles come from the library.
    unsafe {
        assert_eq!(tw_context_open(dir_c.as_ptr(), std::ptr::null_mut()), tw_status::TW_ERR_NULL);
        assert_eq!(tw_context_open(dir_c.as_ptr(), &mut ctx), tw_status::TW_OK);
        assert_eq!(tw_publication_open(ctx, channel.as_ptr(), 1, &mut p), tw_status::TW_OK);
        assert_eq!(tw_subscription_open(ctx, channel.as_ptr(), 1, &mut s), tw_status::TW_OK);
        let bad = CString::new("nonsense:abi").unwrap();
        let mut other = std::ptr::null_mut();
        assert_eq!(tw_publication_open(ctx, bad.as_ptr(), 1, &mut other), tw_status::TW_ERR_INVALID);
        assert!(last().contains("nonsense:abi"), "{}", last());

        // A publication passed as a subscription: refused by its tag.
        let (mut buf, mut len) = ([0u8; 4], 0usize);
        let wrong = p.cast::<tw_subscription>();
        assert_eq!(tw_subscription_receive(wrong, buf.as_mut_ptr(), 4, &mut len, 0), tw_status::TW_ERR_INVALID);
        assert!(last().contains("another type's handle"), "{}", last());

        // Too small a buffer: the length needed, and the message kept.
        assert_eq!(
            tw_publication_offer(p, std::ptr::null(), b"hello".as_ptr(), 5, std::ptr::null_mut()),
            tw_status::TW_OK
        );
        let r = tw_subscription_receive(s, buf.as_mut_ptr(), buf.len(), &mut len, u64::MAX);
        assert_eq!((r, len), (tw_status::TW_ERR_BUFFER_TOO_SMALL, 5));
        let mut big = [0u8; 16];
        assert_eq!(tw_subscription_receive(s, big.as_mut_ptr(), big.len(), &mut len, 0), tw_status::TW_OK);
        assert_eq!(&big[..len], b"hello");
        assert_eq!(tw_subscription_receive(s, big.as_mut_ptr(), big.len(), &mut len, 0), tw_status::TW_ERR_TIMEOUT);

        // Closed: refused, twice, and by every function.
        assert_eq!(tw_subscription_close(s), tw_status::TW_OK);
        assert_eq!(tw_subscription_close(s), tw_status::TW_ERR_CLOSED);
        assert_eq!(tw_subscription_receive(s, big.as_mut_ptr(), 16, &mut len, 0), tw_status::TW_ERR_CLOSED);
        assert_eq!(tw_publication_close(p, 0), tw_status::TW_OK);
        assert_eq!(
            tw_publication_offer(p, std::ptr::null(), b"x".as_ptr(), 1, std::ptr::null_mut()),
            tw_status::TW_ERR_CLOSED
        );
        assert_eq!(tw_context_close(ctx), tw_status::TW_OK);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
