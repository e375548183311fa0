//! Router clients: connect (`ipc`, `tcp://HOST:PORT`, `tls://HOST:PORT`),
//! subscribe with wildcards, queue groups and durable subscriptions,
//! publish (direct or guaranteed), request and reply, acknowledge, poll.

use crate::event::{tw_event, tw_handler};
use crate::guard::{bytes, fence, optional_text, put, text, tw_status, Fail};
use crate::handle::{self, opaque, Handle};
use std::ffi::{c_char, c_void};
use std::time::Duration;
use tickwire_client::{Client, ClientError, ClientOptions, PublishError};

/// A router client.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct tw_client(Handle<Client>);
opaque!(tw_client, Client, "client");

/// How a client connects; every field may be left zero (NULL): the
/// default.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct tw_client_options {
    /// Its name at the router.
    pub name: *const c_char,
    /// The tickwire directory (`ipc`; NULL: the default).
    pub dir: *const c_char,
    /// A user and password, for a router with users.
    pub user: *const c_char,
    /// See `user`.
    pub password: *const c_char,
    /// `tls://`: the certificate authority (PEM) the router's certificate
    /// must chain to.
    pub tls_ca: *const c_char,
    /// Mutual TLS: this client's certificate and key (PEM).
    pub tls_cert: *const c_char,
    /// See `tls_cert`.
    pub tls_key: *const c_char,
    /// Nonzero: this client's publishes do not reach its own
    /// subscriptions.
    pub no_echo: i32,
}

fn client_error(e: ClientError) -> Fail {
    let status = match &e {
        ClientError::Uri(_) | ClientError::Topic(_) => tw_status::TW_ERR_INVALID,
        ClientError::Refused { .. } => tw_status::TW_ERR_REFUSED,
        ClientError::Timeout { .. } => tw_status::TW_ERR_TIMEOUT,
        _ => tw_status::TW_ERR_IO,
    };
    Fail::new(status, e)
}

fn publish_error(e: PublishError) -> Fail {
    let status = match &e {
        // What a publisher's retry loop meets all the time: no allocation.
        PublishError::NotConnected => {
            return Fail::fixed(tw_status::TW_ERR_NOT_CONNECTED, "not connected to the router")
        }
        PublishError::BackPressured => {
            return Fail::fixed(tw_status::TW_ERR_BACK_PRESSURED, "no room: the client's buffer is full")
        }
        PublishError::WindowFull(_) => tw_status::TW_ERR_BACK_PRESSURED,
        PublishError::TooLarge { .. } => tw_status::TW_ERR_TOO_LARGE,
        _ => tw_status::TW_ERR_INVALID,
    };
    Fail::new(status, e)
}

/// The options `o` asks for.
///
/// # Safety
/// `o` NULL or valid, its strings NULL or NUL-terminated.
unsafe fn options(o: *const tw_client_options) -> Result<ClientOptions, Fail> {
    let mut opts = ClientOptions::default();
    if o.is_null() {
        return Ok(opts);
    }
    // SAFETY: not NULL, valid by the caller's contract.
    let o = unsafe { &*o };
    // SAFETY: each NULL or NUL-terminated (the caller's contract).
    unsafe {
        if let Some(n) = optional_text(o.name, "options.name")? {
            opts.name = n.to_owned();
        }
        if let Some(d) = optional_text(o.dir, "options.dir")? {
            opts.dir = d.into();
        }
        opts.user = optional_text(o.user, "options.user")?.map(str::to_owned);
        opts.password = optional_text(o.password, "options.password")?.map(str::to_owned);
        opts.tls_ca = optional_text(o.tls_ca, "options.tls_ca")?.map(Into::into);
        opts.tls_cert = optional_text(o.tls_cert, "options.tls_cert")?.map(Into::into);
        opts.tls_key = optional_text(o.tls_key, "options.tls_key")?.map(Into::into);
    }
    opts.echo = o.no_echo == 0;
    Ok(opts)
}

/// Connects to the router at `uri` (`ipc`, `tcp://HOST:PORT`,
/// `tls://HOST:PORT`) with `options` (may be NULL); into `*out`. The
/// login finishes in the background: `tw_client_wait_connected`, or the
/// `TW_EVENT_CONNECTED` event.
///
/// # Safety
/// `uri` NUL-terminated; `options` NULL or valid; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn tw_client_connect(
    uri: *const c_char,
    options: *const tw_client_options,
    out: *mut *mut tw_client,
) -> tw_status {
    fence(|| {
        if out.is_null() {
            return Err(Fail::new(tw_status::TW_ERR_NULL, "out is NULL"));
        }
        // SAFETY: the caller's contract.
        let (uri, opts) = unsafe { (text(uri, "uri")?, self::options(options)?) };
        let c = Client::connect(uri, opts).map_err(client_error)?;
        // SAFETY: `out` is not NULL and writable.
        unsafe { put(out, handle::open::<tw_client>(c)) };
        Ok(())
    })
}

/// Waits up to `timeout_ms` for the router to welcome the client.
///
/// # Safety
/// `c` a client of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_client_wait_connected(c: *mut tw_client, timeout_ms: u64) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { handle::get(c) }?;
        c.wait_connected(Duration::from_millis(timeout_ms)).map_err(client_error)
    })
}

/// Subscribes to `pattern` (`*` one level, `>` the rest); with `group`
/// (may be NULL) as a member of that queue group. Its id into `*id` (may
/// be NULL).
///
/// # Safety
/// `c` a client of this library; `pattern` NUL-terminated; `group` NULL
/// or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tw_client_subscribe(
    c: *mut tw_client,
    pattern: *const c_char,
    group: *const c_char,
    id: *mut u32,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (c, pattern, group) =
            unsafe { (handle::get(c)?, text(pattern, "pattern")?, optional_text(group, "group")?) };
        let sid = match group {
            Some(g) => c.subscribe_queue(pattern, g),
            None => c.subscribe(pattern),
        }
        .map_err(client_error)?;
        // SAFETY: NULL or writable.
        unsafe { put(id, sid) };
        Ok(())
    })
}

/// Subscribes durably: guaranteed delivery of `pattern` to the durable
/// subscription `name`, kept by the router across disconnections;
/// acknowledge with `tw_client_ack`. Its id into `*id` (may be NULL).
///
/// # Safety
/// As [`tw_client_subscribe`]; `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tw_client_subscribe_durable(
    c: *mut tw_client,
    pattern: *const c_char,
    name: *const c_char,
    id: *mut u32,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (c, pattern, name) = unsafe { (handle::get(c)?, text(pattern, "pattern")?, text(name, "name")?) };
        let sid = c.subscribe_durable(pattern, name).map_err(client_error)?;
        // SAFETY: NULL or writable.
        unsafe { put(id, sid) };
        Ok(())
    })
}

/// Ends subscription `id`.
///
/// # Safety
/// `c` a client of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_client_unsubscribe(c: *mut tw_client, id: u32) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        unsafe { handle::get(c) }?.unsubscribe(id);
        Ok(())
    })
}

/// Publishes `len` bytes at `data` on `topic`.
///
/// # Safety
/// `c` a client of this library; `topic` NUL-terminated; `data` `len`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn tw_client_publish(
    c: *mut tw_client,
    topic: *const c_char,
    data: *const u8,
    len: usize,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (c, topic, msg) = unsafe { (handle::get(c)?, text(topic, "topic")?, bytes(data, len, "data")?) };
        c.publish(topic, msg).map_err(publish_error)
    })
}

/// Publishes in guaranteed mode (stored by the router's journal, then
/// acknowledged); its sequence into `*sequence` (may be NULL).
///
/// # Safety
/// As [`tw_client_publish`].
#[no_mangle]
pub unsafe extern "C" fn tw_client_publish_guaranteed(
    c: *mut tw_client,
    topic: *const c_char,
    data: *const u8,
    len: usize,
    sequence: *mut u64,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (c, topic, msg) = unsafe { (handle::get(c)?, text(topic, "topic")?, bytes(data, len, "data")?) };
        let seq = c.publish_guaranteed(topic, msg).map_err(publish_error)?;
        // SAFETY: NULL or writable.
        unsafe { put(sequence, seq) };
        Ok(())
    })
}

/// Guaranteed publishes the router has acknowledged (every one up to this
/// sequence), into `*acknowledged`.
///
/// # Safety
/// `c` a client of this library; `acknowledged` writable.
#[no_mangle]
pub unsafe extern "C" fn tw_client_acknowledged(c: *mut tw_client, acknowledged: *mut u64) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { handle::get(c) }?.acknowledged();
        // SAFETY: NULL or writable.
        unsafe { put(acknowledged, n) };
        Ok(())
    })
}

/// The number the next direct publish gets (publishes are numbered from
/// 0, as `TW_EVENT_PUBLISH_GAP` names them), into `*published`.
///
/// # Safety
/// `c` a client of this library; `published` writable.
#[no_mangle]
pub unsafe extern "C" fn tw_client_published(c: *mut tw_client, published: *mut u64) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { handle::get(c) }?.published();
        // SAFETY: NULL or writable.
        unsafe { put(published, n) };
        Ok(())
    })
}

/// Acknowledges a durable subscription's deliveries up to `sequence`.
///
/// # Safety
/// `c` a client of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_client_ack(c: *mut tw_client, subscription: u32, sequence: u64) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        unsafe { handle::get(c) }?.ack(subscription, sequence);
        Ok(())
    })
}

/// Sends a request on `topic`: the reply (`TW_EVENT_REPLY`) or its
/// failure (`TW_EVENT_REQUEST_FAILED`) comes to `tw_client_poll` within
/// `timeout_ms`, with the id written to `*request` (may be NULL).
///
/// # Safety
/// As [`tw_client_publish`].
#[no_mangle]
pub unsafe extern "C" fn tw_client_request(
    c: *mut tw_client,
    topic: *const c_char,
    data: *const u8,
    len: usize,
    timeout_ms: u64,
    request: *mut u64,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (c, topic, msg) = unsafe { (handle::get(c)?, text(topic, "topic")?, bytes(data, len, "data")?) };
        let id = c.send_request(topic, msg, Duration::from_millis(timeout_ms)).map_err(publish_error)?;
        // SAFETY: NULL or writable.
        unsafe { put(request, id) };
        Ok(())
    })
}

/// Answers a request on its `inbox` (`inbox_len` bytes, from the
/// `TW_EVENT_REQUEST`).
///
/// # Safety
/// `c` a client of this library; `inbox` `inbox_len` readable bytes;
/// `data` `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn tw_client_reply(
    c: *mut tw_client,
    inbox: *const c_char,
    inbox_len: usize,
    data: *const u8,
    len: usize,
) -> tw_status {
    fence(|| {
        // SAFETY: the caller's contract.
        let (c, inbox, msg) =
            unsafe { (handle::get(c)?, bytes(inbox.cast(), inbox_len, "inbox")?, bytes(data, len, "data")?) };
        let inbox = std::str::from_utf8(inbox).map_err(|e| Fail::new(tw_status::TW_ERR_INVALID, e))?;
        c.reply(inbox, msg).map_err(publish_error)
    })
}

/// Writes what the client holds back for batching (TCP).
///
/// # Safety
/// `c` a client of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_client_flush(c: *mut tw_client) -> tw_status {
    // SAFETY: the caller's contract.
    fence(|| unsafe { handle::get(c) }?.flush().map_err(publish_error))
}

/// Hands up to `max` events to `handler` (with `user`); their count into
/// `*count` (may be NULL). An event's pointers are valid during its call
/// only, and the callback may not call this client's functions
/// (`TW_ERR_BUSY`): copy what it needs, act after the poll returns. Also
/// the client's duty cycle: heartbeats, reconnection, request timeouts.
///
/// # Safety
/// `c` a client of this library; `handler` safe to call with `user`.
#[no_mangle]
pub unsafe extern "C" fn tw_client_poll(
    c: *mut tw_client,
    handler: tw_handler,
    user: *mut c_void,
    max: usize,
    count: *mut usize,
) -> tw_status {
    fence(|| {
        let Some(f) = handler else { return Err(Fail::new(tw_status::TW_ERR_NULL, "handler is NULL")) };
        // SAFETY: the caller's contract.
        let n = unsafe { handle::with_taken(c, |c| c.poll(|e| f(user, &tw_event::of_client(&e)), max)) }?;
        // SAFETY: NULL or writable.
        unsafe { put(count, n) };
        Ok(())
    })
}

/// Closes a client: its session at the router ends.
///
/// # Safety
/// `c` NULL or a client of this library.
#[no_mangle]
pub unsafe extern "C" fn tw_client_close(c: *mut tw_client) -> tw_status {
    // SAFETY: the caller's contract.
    fence(|| unsafe { handle::close(c) }.map(Client::close))
}
