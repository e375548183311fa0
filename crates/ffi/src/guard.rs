//! What every entry point shares: status codes, the thread's last error
//! message, the panic fence, and reading the caller's pointers. The
//! crate's `unsafe` is here and in [`crate::handle`], each block with its
//! `SAFETY` argument.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call did: `TW_OK`, or why not (the message:
/// [`tw_last_error`]).
#[repr(C)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tw_status {
    /// Done.
    TW_OK = 0,
    /// A pointer the call needs was NULL.
    TW_ERR_NULL = 1,
    /// An argument is not valid: not UTF-8, a bad URI, topic or pattern.
    TW_ERR_INVALID = 2,
    /// Opening or connecting failed (the message says what the system said).
    TW_ERR_IO = 3,
    /// No room now (the subscriber or router is behind): poll, then retry.
    TW_ERR_BACK_PRESSURED = 4,
    /// Not connected (no subscriber attached; not logged in to the router).
    TW_ERR_NOT_CONNECTED = 5,
    /// The message is larger than the channel or router takes.
    TW_ERR_TOO_LARGE = 6,
    /// The caller's buffer is too small: the length needed was written and
    /// the message is kept for the next call.
    TW_ERR_BUFFER_TOO_SMALL = 7,
    /// Nothing happened within the time allowed.
    TW_ERR_TIMEOUT = 8,
    /// The router refused (a password, an ACL, a limit).
    TW_ERR_REFUSED = 9,
    /// The handle was closed already.
    TW_ERR_CLOSED = 10,
    /// A bug in tickwire: a panic, stopped at the boundary.
    TW_ERR_PANIC = 11,
    /// The handle is polling: a call on it from its own poll's callback
    /// (copy what the event says; act after the poll returns).
    TW_ERR_BUSY = 12,
}

thread_local! {
    static LAST: RefCell<Vec<u8>> = RefCell::new(vec![0]);
}

/// An error for the caller: its status and message.
#[derive(Debug)]
pub(crate) struct Fail(pub(crate) tw_status, pub(crate) Cow<'static, str>);

impl Fail {
    pub(crate) fn new(status: tw_status, why: impl std::fmt::Display) -> Self {
        Self(status, Cow::Owned(why.to_string()))
    }

    /// A failure with a fixed message: no allocation (the outcomes a
    /// polling loop meets all the time, such as `TW_ERR_TIMEOUT`).
    pub(crate) const fn fixed(status: tw_status, why: &'static str) -> Self {
        Self(status, Cow::Borrowed(why))
    }
}

/// Keeps `why` as this thread's last error.
fn remember(why: &str) {
    // Into the thread's buffer, reused (no allocation once it is large
    // enough), NUL-terminated, any NUL inside made a space.
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        l.clear();
        l.extend(why.bytes().map(|b| if b == 0 { b' ' } else { b }));
        l.push(0);
    });
}

/// The message of this thread's last failed call (empty if none failed
/// yet): valid until this thread's next failed call. Never NULL.
#[no_mangle]
pub extern "C" fn tw_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr().cast())
}

/// Runs an entry point's body: its error is remembered and returned as a
/// status; a panic is stopped here, never unwinds into C.
pub(crate) fn fence(body: impl FnOnce() -> Result<(), Fail>) -> tw_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => tw_status::TW_OK,
        Ok(Err(Fail(status, why))) => {
            remember(&why);
            status
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            remember(&format!("tickwire panicked (a bug; please report it): {what}"));
            tw_status::TW_ERR_PANIC
        }
    }
}

/// A NUL-terminated UTF-8 string argument named `what`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid for
/// `'a`.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::new(tw_status::TW_ERR_NULL, format!("{what} is NULL")));
    }
    // SAFETY: not NULL, and NUL-terminated and valid for 'a by the
    // caller's contract.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|e| Fail::new(tw_status::TW_ERR_INVALID, format!("{what} is not UTF-8: {e}")))
}

/// [`text`], or `None` for NULL.
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn optional_text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract, as for `text`.
    unsafe { text(p, what) }.map(Some)
}

/// `len` bytes at `p` (NULL allowed when `len` is 0).
///
/// # Safety
/// `p` is NULL with `len` 0, or points to `len` readable bytes valid for
/// `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(tw_status::TW_ERR_NULL, format!("{what} is NULL with a length of {len}")));
    }
    // SAFETY: not NULL, `len` readable bytes valid for 'a by the caller's
    // contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Writes `v` through an out-pointer that may be NULL (then nothing).
///
/// # Safety
/// `p` is NULL or points to a writable `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: not NULL and writable by the caller's contract.
        unsafe { p.write(v) };
    }
}
