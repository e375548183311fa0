//! Channels without a router: a context (the shared-memory directory),
//! publications and subscriptions on `ipc:NAME` or reliable UDP
//! (`udp://HOST:PORT`, multicast), as `tickwire_driver` makes them.

use crate::event::{tw_event, tw_handler};
use crate::guard::{bytes, fence, optional_text, put, text, tw_status, Fail};
use crate::handle::{self, opaque, Handle};
use std::ffi::{c_char, c_void};
use std::time::Duration;
use tickwire_driver::{Channel, Event, OfferError, Publication, Subscription};
use tickwire_shm::Context;

/// A tickwire directory: where shared-memory logs and counters are.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct tw_context(Handle<Context>);
opaque!(tw_context, Context, "context");

/// A publication on a channel.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct tw_publication(Handle<Publication>);
opaque!(tw_publication, Publication, "publication");

/// A subscription on a channel, with the message a too-small buffer left
/// for the next `tw_subscription_receive`.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct tw_subscription(Handle<Kept>);
opaque!(tw_subscription, Kept, "subscription");

/// A subscription and the message (topic, payload) kept for the next
/// `tw_subscription_receive`.
type Kept = (Subscription, Option<(String, Vec<u8>)>);

fn io(e: impl std::fmt::Display) -> Fail {
    Fail::new(tw_status::TW_ERR_IO, e)
}

fn offer_error(e: OfferError) -> Fail {
    match e {
        // What a publisher's retry loop meets all the time: no allocation.
        OfferError::NotConnected => Fail::fixed(tw_status::TW_ERR_NOT_CONNECTED, "no subscriber is attached"),
        OfferError::BackPressured => {
            Fail::fixed(tw_status::TW_ERR_BACK_PRESSURED, "no room: the slowest subscriber is full")
        }
        OfferError::Closed => Fail::new(tw_status::TW_ERR_CLOSED, e),
        _ => Fail::new(tw_status::TW_ERR_TOO_LARGE, e),
    }
}

/// The context and the channel a publication or subscription opens on.
///
/// # Safety
/// `ctx` a context of this library; `channel` NUL-terminated.
unsafe fn on_channel<'a>(
    ctx: *mut tw_context,
    channel: *const c_char,
) -> Result<(&'a Context, Channel, &'a str), Fail> {
    // SAFETY: the caller's contract.
    let (ctx, uri) = unsafe { (handle::get(ctx)?, text(channel, "channel")?) };
    let ch = uri.parse().map_err(|e| Fail::new(tw_status::TW_ERR_INVALID, format!("{uri}: {e}")))?;
    Ok((ctx, ch, uri))
}

/// Opens the tickwire directory `dir` (NULL: the default,
/// `/dev/shm/tickwire-USER`), creating it `0700`; into `*out`.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `out` points to a writable
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn tw_context_open(dir: *const c_char, out: *mut *mut tw_context) -> tw_status {
    fence(|| {
        if out.is_null() {
            return Err(Fail::new(tw_status::TW_ERR_NULL, "out is NULL"));
        }
        // SAFETY: the caller's contract.
        let dir = unsafe { optional_text(dir, "dir") }?.map_or_else(tickwire_shm::default_dir, Into::into);
        let ctx = Context::new(&dir).map_err(|e| io(format!("{}: {e}", dir.display())))?;
        // SAFETY: `out` is not NULL and writable (the caller's contract).
        unsafe { put(out, handle::open::<tw_context>(ctx)) };
        Ok(())
    })
}

/// Closes a context (its publications and subscriptions stay usable).
///
/// # Safety
/// `ctx` is NULL or a context this library returned.
#[no_mangle]
pub unsafe extern "C" fn tw_context_close(ctx: *mut tw_context) -> tw_status {
    // SAFETY: the caller's contract.
    fence(|| unsafe { handle::close(ctx) }.map(drop))
}

/// Opens a publication on `channel` (`ipc:NAME`, `udp://HOST:PORT`, ...)
/// and stream `stream`; into `*out`.
///
/// # Safety
/// `ctx` a context of this library; `channel` a NUL-terminated string;
/// `out` points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn tw_publication_open(
    ctx: *mut tw_context,
    channel: *const c_char,
    stream: u32,
    out: *mut *mut tw_publication,
) -> tw_status {
    fence(|| {
        if out.is_null() {
            return Err(Fail::new(tw_status::TW_ERR_NULL, "out is NULL"));
        }
        // SAFETY: the caller's contract.
        let (ctx, ch, uri) = unsafe { on_channel(ctx, channel) }?;
        let p = Publication::open(ctx, &ch, stream).map_err(|e| io(format!("{uri}: {e}")))?;
        // SAFETY: `out` is not NULL and writable.
        unsafe { put(out, handle::open::<tw_publication>(p)) };
        Ok(())
    })
}

/// Publishes `len` bytes at `data` on `topic` (NULL: none); its position
/// into `*position` (may be NULL).
///
/// # Safety
/// `p` a publication of this library; `topic` NULL or NUL-terminated;
/// `data` `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn tw_publication_offer(
    p: *mut tw_publication,
    topic: *const c_char,
    data: *const u8,
    len: usize,
    position: *mut u64,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (p, topic, msg) = unsafe { (handle::get(p)?, optional_text(topic, "topic")?, bytes(data, len, "data")?) };
        let at = match topic {
            Some(t) => p.offer_topic(t, msg),
            None => p.offer(msg),
        }
        .map_err(offer_error)?;
        // SAFETY: NULL or writable.
        unsafe { put(position, at) };
        Ok(())
    })
}

/// The publication's duty cycle (reliable UDP: status, retransmissions;
/// call it while idle); the work done into `*work` (may be NULL).
///
/// # Safety
/// `p` a publication of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_publication_do_work(p: *mut tw_publication, work: *mut usize) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { handle::get(p) }?.do_work();
        // SAFETY: NULL or writable.
        unsafe { put(work, n) };
        Ok(())
    })
}

/// Closes a publication: ends its stream, waiting up to `linger_ms` for
/// reliable UDP receivers to have everything.
///
/// # Safety
/// `p` NULL or a publication of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_publication_close(p: *mut tw_publication, linger_ms: u64) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let p = unsafe { handle::close(p) }?;
        p.close(Duration::from_millis(linger_ms)).map(drop).map_err(|e| Fail::new(tw_status::TW_ERR_TIMEOUT, e))
    })
}

/// Opens a subscription on `channel` and stream `stream`; into `*out`.
///
/// # Safety
/// As [`tw_publication_open`].
#[no_mangle]
pub unsafe extern "C" fn tw_subscription_open(
    ctx: *mut tw_context,
    channel: *const c_char,
    stream: u32,
    out: *mut *mut tw_subscription,
) -> tw_status {
    fence(|| {
        if out.is_null() {
            return Err(Fail::new(tw_status::TW_ERR_NULL, "out is NULL"));
        }
        // SAFETY: the caller's contract.
        let (ctx, ch, uri) = unsafe { on_channel(ctx, channel) }?;
        let s = Subscription::open(ctx, &ch, stream).map_err(|e| io(format!("{uri}: {e}")))?;
        // SAFETY: `out` is not NULL and writable.
        unsafe { put(out, handle::open::<tw_subscription>((s, None))) };
        Ok(())
    })
}

/// Hands up to `max` events to `handler` (with `user`); their count into
/// `*count` (may be NULL). An event's pointers are valid during its call
/// only; the callback may not call this subscription's functions
/// (`TW_ERR_BUSY`).
///
/// # Safety
/// `s` a subscription of this library; `handler` a function safe to call
/// with `user`.
#[no_mangle]
pub unsafe extern "C" fn tw_subscription_poll(
    s: *mut tw_subscription,
    handler: tw_handler,
    user: *mut c_void,
    max: usize,
    count: *mut usize,
) -> tw_status {
    fence(|| {
        let Some(f) = handler else { return Err(Fail::new(tw_status::TW_ERR_NULL, "handler is NULL")) };
        // SAFETY: the caller's contract.
        let polled = unsafe { handle::with_taken(s, |(sub, _)| sub.poll(|e| f(user, &tw_event::of_channel(&e)), max)) };
        let n = polled?.map_err(io)?;
        // SAFETY: NULL or writable.
        unsafe { put(count, n) };
        Ok(())
    })
}

/// Copies the next message's payload into `buf` (`cap` bytes) and its
/// length into `*len`; `TW_ERR_TIMEOUT` if none came within `timeout_us`
/// (0: look once). A payload longer than `cap` is
/// `TW_ERR_BUFFER_TOO_SMALL`, its length in `*len`, and it is kept for the
/// next call. Events other than messages (losses included) are passed
/// over: `tw_subscription_poll` hands them all. It spins while it waits,
/// as a subscriber on a pinned core does.
///
/// # Safety
/// `s` a subscription of this library; `buf` `cap` writable bytes; `len`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn tw_subscription_receive(
    s: *mut tw_subscription,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    timeout_us: u64,
) -> tw_status {
    fence(|| {
        if len.is_null() || (buf.is_null() && cap > 0) {
            return Err(Fail::new(tw_status::TW_ERR_NULL, "buf or len is NULL"));
        }
        // SAFETY: the caller's contract.
        let (sub, kept) = unsafe { handle::get(s) }?;
        // A message a too-small buffer left goes first.
        if let Some((_, payload)) = kept.as_ref() {
            // SAFETY: `len` is not NULL and writable.
            unsafe { put(len, payload.len()) };
            if payload.len() > cap {
                return Err(too_small(payload.len(), cap));
            }
            if !payload.is_empty() {
                // SAFETY: `buf` has `cap` >= payload.len() > 0 writable
                // bytes (the caller's contract; not NULL, as cap > 0), and
                // does not overlap our own vector.
                unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), buf, payload.len()) };
            }
            *kept = None;
            return Ok(());
        }
        // The deadline is read off the clock only once a look found
        // nothing: a message already there costs no clock read.
        let mut until: Option<Option<std::time::Instant>> = None;
        loop {
            let mut got: Option<usize> = None;
            sub.poll(
                |e| {
                    if let (Event::Message(m), None) = (e, got) {
                        got = Some(m.payload.len());
                        if m.payload.is_empty() {
                            // Nothing to copy (and `buf` may be NULL).
                        } else if m.payload.len() <= cap {
                            // SAFETY: `buf` has `cap` >= the payload's
                            // length > 0 writable bytes (the caller's
                            // contract; not NULL, as cap > 0); the log's
                            // memory is not the caller's buffer.
                            unsafe { std::ptr::copy_nonoverlapping(m.payload.as_ptr(), buf, m.payload.len()) };
                        } else {
                            *kept = Some((m.topic.to_owned(), m.payload.to_vec()));
                        }
                    }
                },
                1,
            )
            .map_err(io)?;
            if let Some(n) = got {
                // SAFETY: `len` is not NULL and writable.
                unsafe { put(len, n) };
                return if n > cap { Err(too_small(n, cap)) } else { Ok(()) };
            }
            if timeout_us == 0 {
                return Err(Fail::fixed(tw_status::TW_ERR_TIMEOUT, "no message"));
            }
            // A timeout past the clock's range waits for ever.
            let until =
                *until.get_or_insert_with(|| std::time::Instant::now().checked_add(Duration::from_micros(timeout_us)));
            if until.is_some_and(|u| std::time::Instant::now() >= u) {
                return Err(Fail::fixed(tw_status::TW_ERR_TIMEOUT, "no message"));
            }
        }
    })
}

fn too_small(n: usize, cap: usize) -> Fail {
    Fail::new(
        tw_status::TW_ERR_BUFFER_TOO_SMALL,
        format!("a message of {n} bytes, a buffer of {cap}: kept for the next call"),
    )
}

/// Closes a subscription.
///
/// # Safety
/// `s` NULL or a subscription of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_subscription_close(s: *mut tw_subscription) -> tw_status {
    // SAFETY: the caller's contract.
    fence(|| unsafe { handle::close(s) }.map(drop))
}
