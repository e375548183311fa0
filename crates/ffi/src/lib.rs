//! # tickwire-ffi: tickwire's C ABI (`libtickwire`, `include/tickwire.h`)
//!
//! C (and C++, through `include/tickwire.hpp`) reach tickwire through
//! opaque handles and `extern "C"` functions, `tw_*`:
//!
//! * [`channel`]: `tw_context` (the shared-memory directory),
//!   `tw_publication` and `tw_subscription` on `ipc:NAME` and reliable UDP
//!   channels, as `tickwire_driver` makes them.
//! * [`client`]: `tw_client`, the router client: shared memory, TCP, TLS;
//!   wildcards, queue groups, durable subscriptions, guaranteed publishes,
//!   request/reply.
//! * [`event`]: what a poll hands the caller's callback, a tagged
//!   `tw_event` whose pointers look into the log or buffer the message is
//!   in (zero copy, valid during the callback).
//!
//! Under them, `guard` and `handle` hold every `unsafe` block: every entry
//! point runs inside a panic fence (a panic is `TW_ERR_PANIC`, never an
//! unwind into C), returns a `tw_status` with the message in
//! `tw_last_error()` (per thread), and checks its pointers: NULL is
//! `TW_ERR_NULL`, a closed handle `TW_ERR_CLOSED`. A handle is used by one
//! thread at a time.
//!
//! The header is generated from this crate with `cbindgen` and committed;
//! `tests/header.rs` fails when it is out of date (`TICKWIRE_BLESS=1`
//! writes it).

pub mod channel;
pub mod client;
pub mod event;
mod guard;
mod handle;

pub use guard::{tw_last_error, tw_status};

// The frame flags `tw_event.flags` carries, as the client protocol has them.
const _: () = {
    use tickwire_wire::client::flags;
    assert!(event::TW_FLAG_GUARANTEED == flags::GUARANTEED as u32 && event::TW_FLAG_CACHED == flags::CACHED as u32);
    assert!(event::TW_FLAG_HEADERS == flags::HEADERS as u32 && event::TW_FLAG_REDELIVERED == flags::REDELIVERED as u32);
    assert!(event::TW_FLAG_REQUEST == flags::REQUEST as u32 && event::TW_FLAG_QUEUE == flags::QUEUE as u32);
};
