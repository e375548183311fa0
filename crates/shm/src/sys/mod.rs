//! Everything the operating system must provide to the shared-memory layer.
//!
//! A backend implements: shared file mappings ([`map_file`], [`map_anonymous`],
//! [`Mapping`]), futex wait/wake on a 32-bit word in a shared mapping
//! ([`futex_wait`], [`futex_wake`]), an asymmetric barrier ([`membarrier_register`],
//! [`membarrier_global`]), process identity and liveness
//! ([`ProcessId`]), a system-wide monotonic clock ([`monotonic_ns`]), and a way to hand
//! the allocator's free memory back ([`release_free_memory`]).
//! A SIGBUS on a registered file mapping (the file was truncated under us)
//! exits with a message naming the file ([`sigbus`]). Only Linux is
//! implemented.

mod linux;
pub mod sigbus;
pub use linux::*;
