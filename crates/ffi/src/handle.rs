//! Opaque handles: what a C caller holds for a context, publication,
//! subscription or client. A handle is an allocation with a tag word and
//! the object. Closing one drops the object and marks the tag closed, but
//! keeps the small allocation for the life of the process (in
//! `TOMBSTONES`, so leak checkers see it reachable): a caller that passes
//! a handle after closing it gets `TW_ERR_CLOSED`, never a use after free.
//! Each type has its own tags, so a handle of one type passed as another
//! is `TW_ERR_INVALID`. A pointer this library never returned is beyond
//! any check.
//!
//! A handle is used by one thread at a time (the caller's duty, as for
//! Aeron's C client in invoker mode): nothing here locks on the hot path.

use crate::guard::{tw_status, Fail};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Mutex;

const OPEN: u64 = 0x7477_6f70_656e_2121;
const CLOSED: u64 = 0x7477_636c_6f73_6564;

/// A type's own tags: a handle of one type passed as another's is
/// refused (`TW_ERR_INVALID`), open or closed.
const fn tag(base: u64, what: &str) -> u64 {
    // FNV-1a of the type's name.
    let (bytes, mut h, mut i) = (what.as_bytes(), 0xcbf2_9ce4_8422_2325u64, 0);
    while i < bytes.len() {
        h = (h ^ bytes[i] as u64).wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    base ^ h
}

/// Closed handles' allocations, kept.
static TOMBSTONES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A handle's allocation: its tag first (`repr(C)`), read before any
/// reference to the handle is made.
#[derive(Debug)]
#[repr(C)]
pub struct Handle<T> {
    pub(crate) tag: u64,
    inner: Option<T>,
}

impl<T> Handle<T> {
    /// A new open handle of the type named `what`.
    pub(crate) fn new(v: T, what: &str) -> Self {
        Self { tag: tag(OPEN, what), inner: Some(v) }
    }
}

/// What a handle type is, for the checks.
pub(crate) trait Opaque: Sized {
    type Inner;
    const WHAT: &'static str;
    fn handle(&mut self) -> &mut Handle<Self::Inner>;
    fn wrap(h: Handle<Self::Inner>) -> Self;
}

/// A new handle for C.
pub(crate) fn open<H: Opaque>(v: H::Inner) -> *mut H {
    Box::into_raw(Box::new(H::wrap(Handle::new(v, H::WHAT))))
}

/// The object of handle `p`.
///
/// # Safety
/// `p` is NULL or a handle of type `H` this library returned (open or
/// closed), not used by another thread during the call.
pub(crate) unsafe fn get<'a, H: Opaque + 'a>(p: *mut H) -> Result<&'a mut H::Inner, Fail> {
    if p.is_null() {
        return Err(Fail::new(tw_status::TW_ERR_NULL, format!("the {} is NULL", H::WHAT)));
    }
    let (open, closed) = (tag(OPEN, H::WHAT), tag(CLOSED, H::WHAT));
    // SAFETY: a live allocation this library made for some handle type
    // (closed ones are never freed; the caller's contract), whose first 8
    // bytes are its tag: every handle type is its `Handle` at offset 0,
    // and a `Handle` (`repr(C)`) starts with the tag (`opaque!` asserts
    // both). Nothing else is read before the tag says it is an `H`.
    let t = unsafe { p.cast::<u64>().read() };
    if t != open && t != closed {
        return Err(Fail::new(tw_status::TW_ERR_INVALID, format!("that is not a {} (another type's handle)", H::WHAT)));
    }
    // SAFETY: an `H` (its tag says so), used by this thread alone.
    let h = unsafe { &mut *p }.handle();
    match (h.tag, h.inner.as_mut()) {
        (t, Some(v)) if t == open => Ok(v),
        (t, None) if t == open => Err(Fail::new(
            tw_status::TW_ERR_BUSY,
            format!("the {} is polling: not from within its own poll's callback", H::WHAT),
        )),
        (t, _) if t == closed => Err(Fail::new(tw_status::TW_ERR_CLOSED, format!("the {} was closed", H::WHAT))),
        _ => Err(Fail::new(tw_status::TW_ERR_INVALID, format!("that is not a {} (another type's handle)", H::WHAT))),
    }
}

/// Runs `f` on handle `p`'s object taken out of the handle (a poll, whose
/// callback may call this library again): a call on the same handle from
/// `f` finds it busy (`TW_ERR_BUSY`) instead of a second reference to the
/// object.
///
/// # Safety
/// As [`get`].
pub(crate) unsafe fn with_taken<H: Opaque, R>(p: *mut H, f: impl FnOnce(&mut H::Inner) -> R) -> Result<R, Fail> {
    // SAFETY: as for `get`, the caller's contract.
    unsafe { get(p) }?;
    // SAFETY: checked just above; no reference into it is held across `f`.
    let Some(mut v) = (unsafe { &mut *p }).handle().inner.take() else { unreachable!("checked open") };
    // A panic in `f` still puts the object back (then goes on to the
    // caller's fence): the handle is not left busy for good.
    let r = catch_unwind(AssertUnwindSafe(|| f(&mut v)));
    // SAFETY: still this library's allocation (closing it from `f` was
    // refused as busy); `f`'s references into it have ended.
    (unsafe { &mut *p }).handle().inner = Some(v);
    r.map_err(|panic| resume_unwind(panic))
}

/// Closes handle `p`: its object, taken out (to drop or to close).
///
/// # Safety
/// As [`get`].
pub(crate) unsafe fn close<H: Opaque>(p: *mut H) -> Result<H::Inner, Fail> {
    // SAFETY: as for `get`, the caller's contract.
    unsafe { get(p) }?;
    // SAFETY: checked just above: a live, open handle of this thread's.
    let h = unsafe { &mut *p }.handle();
    h.tag = tag(CLOSED, H::WHAT);
    let v = h.inner.take();
    TOMBSTONES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(p as usize);
    v.ok_or_else(|| Fail::new(tw_status::TW_ERR_CLOSED, format!("the {} was closed", H::WHAT)))
}

/// Makes `$name` (declared where it is, for cbindgen to see) a handle
/// holding a `$inner`.
macro_rules! opaque {
    ($name:ident, $inner:ty, $what:literal) => {
        // The tag is the handle's first 8 bytes (read before the type is
        // known).
        const _: () = assert!(std::mem::offset_of!($name, 0) == 0);
        const _: () = assert!(std::mem::offset_of!(crate::handle::Handle<$inner>, tag) == 0);

        impl crate::handle::Opaque for $name {
            type Inner = $inner;
            const WHAT: &'static str = $what;
            fn handle(&mut self) -> &mut crate::handle::Handle<$inner> {
                &mut self.0
            }
            fn wrap(h: crate::handle::Handle<$inner>) -> Self {
                Self(h)
            }
        }
    };
}
pub(crate) use opaque;
