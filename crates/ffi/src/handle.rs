//! Opaque handles: what a C caller holds for a context, publication,
//! subscription or client. A handle is an allocation with a tag word and
//! the object. Closing one drops the object and marks the tag closed, but
//! keeps the small allocation for the life of the process (in
//! `TOMBSTONES`, so leak checkers see it reachable): a caller that passes
//! a handle after closing it gets `TW_ERR_CLOSED`, never a use after free.
//! A pointer this library never returned is beyond any check.
//!
//! A handle is used by one thread at a time (the caller's duty, as for
//! Aeron's C client in invoker mode): nothing here locks on the hot path.

use crate::guard::{tw_status, Fail};
use std::sync::Mutex;

const OPEN: u64 = 0x7477_6f70_656e_2121;
const CLOSED: u64 = 0x7477_636c_6f73_6564;

/// Closed handles' allocations, kept.
static TOMBSTONES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A handle's allocation.
#[derive(Debug)]
pub struct Handle<T> {
    tag: u64,
    inner: Option<T>,
}

impl<T> Handle<T> {
    /// A new open handle.
    pub(crate) fn new(v: T) -> Self {
        Self { tag: OPEN, inner: Some(v) }
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
    Box::into_raw(Box::new(H::wrap(Handle::new(v))))
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
    // SAFETY: a live allocation this library made for an `H` (closed ones
    // are never freed), used by this thread alone, by the caller's
    // contract.
    let h = unsafe { &mut *p }.handle();
    match (h.tag, h.inner.as_mut()) {
        (OPEN, Some(v)) => Ok(v),
        (OPEN, None) => Err(Fail::new(
            tw_status::TW_ERR_BUSY,
            format!("the {} is polling: not from within its own poll's callback", H::WHAT),
        )),
        (CLOSED, _) => Err(Fail::new(tw_status::TW_ERR_CLOSED, format!("the {} was closed", H::WHAT))),
        _ => Err(Fail::new(tw_status::TW_ERR_INVALID, format!("that is not a {} (bad tag)", H::WHAT))),
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
    let r = f(&mut v);
    // SAFETY: still this library's allocation (closing it from `f` was
    // refused as busy); `f`'s references into it have ended.
    (unsafe { &mut *p }).handle().inner = Some(v);
    Ok(r)
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
    h.tag = CLOSED;
    let v = h.inner.take();
    TOMBSTONES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(p as usize);
    v.ok_or_else(|| Fail::new(tw_status::TW_ERR_CLOSED, format!("the {} was closed", H::WHAT)))
}

/// Makes `$name` (declared where it is, for cbindgen to see) a handle
/// holding a `$inner`.
macro_rules! opaque {
    ($name:ident, $inner:ty, $what:literal) => {
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
