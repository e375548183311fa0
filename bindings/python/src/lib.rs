//! tickwire for Python: the extension module `tickwire._tickwire`, which
//! the package `tickwire` (python/tickwire) re-exports.
//!
//! Layers, top down:
//! * `channel`: `Context`, `Publication`, `Subscription`, channels without
//!   a router (shared memory `ipc:NAME`, reliable UDP), over
//!   `tickwire_driver`.
//! * `client`: `Client`, a router client (`ipc`, `tcp://`, `tls://`), and
//!   `Messages`, one subscription's messages, over
//!   `tickwire_client`.
//! * `event`: what both hand to Python: `Message` and the other events, as
//!   frozen objects; `wait`, how a call waits (spinning with the GIL held,
//!   then parked with it released).
//! * here: the exceptions, and `Slot`, the lock every object keeps its
//!   Rust side in (a closed object raises `ClosedError`, an object in use
//!   by another thread `BusyError`; never a crash).

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, TryLockError};

mod channel;
mod client;
mod event;

create_exception!(_tickwire, Error, PyException, "Every error tickwire raises.");
create_exception!(_tickwire, ClosedError, Error, "The object was closed.");
create_exception!(_tickwire, BusyError, Error, "Another thread is using the object.");
create_exception!(
    _tickwire,
    BackPressured,
    Error,
    "No room now: the slowest subscriber (or the client's buffer) is full."
);
create_exception!(_tickwire, NotConnected, Error, "Nobody is listening, or the router is not connected.");
create_exception!(_tickwire, TooLarge, Error, "The message is larger than the channel or router takes.");
create_exception!(_tickwire, RefusedError, Error, "The router refused (a login, a request, a subscription).");
create_exception!(_tickwire, NoResponders, Error, "No subscription wants the request's topic.");

/// An object's Rust side, `None` once closed.
///
/// `close()` never waits for another call: it marks the slot closing and
/// takes the value if no call holds it; a call that holds it (a wait in
/// another thread, or the very call a signal handler interrupted) sees the
/// mark within one wait slice, ends with `ClosedError`, and drops the value
/// as it returns.
pub(crate) struct Slot<T> {
    what: &'static str,
    inner: Mutex<Option<T>>,
    closing: AtomicBool,
}

impl<T> Slot<T> {
    pub(crate) fn new(what: &'static str, value: T) -> Self {
        Self { what, inner: Mutex::new(Some(value)), closing: AtomicBool::new(false) }
    }

    fn closed(&self) -> PyErr {
        ClosedError::new_err(format!("the {} is closed", self.what))
    }

    /// The mark `close()` sets, for waits to look at.
    pub(crate) fn closing(&self) -> &AtomicBool {
        &self.closing
    }

    /// The value, for `f`; `BusyError` while another thread has it,
    /// `ClosedError` once closed.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> PyResult<R>) -> PyResult<R> {
        let mut guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) if self.closing.load(Ordering::Acquire) => return Err(self.closed()),
            Err(TryLockError::WouldBlock) => {
                return Err(BusyError::new_err(format!("the {} is in use by another thread", self.what)))
            }
            // A panic inside `f` poisoned it: the value is still whole
            // (every `f` leaves it consistent), so go on.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let r = match guard.as_mut() {
            Some(_) if self.closing.load(Ordering::Acquire) => Err(self.closed()),
            Some(v) => f(v),
            None => Err(self.closed()),
        };
        if self.closing.load(Ordering::Acquire) {
            // Closed while `f` ran (from another thread, or a signal
            // handler inside it): the value goes now.
            drop(guard.take());
        }
        r
    }

    /// Closes: the value if no call holds it (else that call drops it
    /// when it returns, see the type).
    pub(crate) fn take(&self) -> Option<T> {
        self.closing.store(true, Ordering::Release);
        match self.inner.try_lock() {
            Ok(mut g) => g.take(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().take(),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// What `__next__` returns for a waiting `receive(None)`: the event, or
/// the iteration's end once the object is closed.
pub(crate) fn until_closed(py: Python<'_>, r: PyResult<Option<Py<PyAny>>>) -> PyResult<Option<Py<PyAny>>> {
    match r {
        Err(e) if e.is_instance_of::<ClosedError>(py) => Ok(None),
        r => r,
    }
}

/// What `__aiter__` returns: `tickwire.aio.events(source)`.
pub(crate) fn aiter<'py>(source: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    source.py().import("tickwire.aio")?.call_method1("events", (source,))
}

/// `e` with a `published` attribute: how many messages went before it.
pub(crate) fn with_published(py: Python<'_>, e: PyErr, n: usize) -> PyErr {
    let _ = e.value(py).setattr("published", n);
    e
}

/// `ClosedError` once `closing` is marked.
pub(crate) fn check_open(closing: &AtomicBool) -> PyResult<()> {
    match closing.load(Ordering::Acquire) {
        true => Err(ClosedError::new_err("closed while waiting")),
        false => Ok(()),
    }
}

/// `f` over the bytes of `ob`: `bytes` as they are, anything else with the
/// buffer protocol (`bytearray`, `memoryview`, `array`, numpy) copied
/// once, as bytes.
pub(crate) fn with_bytes<R>(ob: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = ob.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    if let Ok(b) = ob.cast::<pyo3::types::PyByteArray>() {
        return Ok(f(&b.to_vec()));
    }
    match PyBuffer::<u8>::get(ob) {
        Ok(buf) => Ok(f(&buf.to_vec(ob.py())?)),
        // A buffer of other items (array('i'), a numpy array): its bytes.
        Err(e) => match pyo3::types::PyMemoryView::from(ob).and_then(|m| m.call_method1("cast", ("B",))) {
            Ok(bytes) => Ok(f(&PyBuffer::<u8>::get(&bytes)?.to_vec(ob.py())?)),
            Err(_) => Err(e),
        },
    }
}

/// A duration in seconds, checked, for `what` (the argument's name).
pub(crate) fn seconds(what: &str, t: f64) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(t).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!("{what} must be a number of seconds, 0 or more, not {t}"))
    })
}

/// A timeout in seconds, checked (`None`, or one past the clock's range:
/// for ever).
pub(crate) fn timeout(t: Option<f64>) -> PyResult<Option<std::time::Duration>> {
    match t {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "timeout must be a number of seconds, 0 or more (or None), not {t}"
        ))),
        Some(t) => Ok(std::time::Duration::try_from_secs_f64(t).ok()),
    }
}

/// The deadline `timeout` from now (`None`: never). Read off the clock
/// only when a first try found nothing, so a call that succeeds at once
/// costs no clock read.
pub(crate) fn deadline(timeout: Option<std::time::Duration>) -> Option<std::time::Instant> {
    timeout.and_then(|d| std::time::Instant::now().checked_add(d))
}

#[pymodule]
fn _tickwire(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    for (name, e) in [
        ("Error", py.get_type::<Error>()),
        ("ClosedError", py.get_type::<ClosedError>()),
        ("BusyError", py.get_type::<BusyError>()),
        ("BackPressured", py.get_type::<BackPressured>()),
        ("NotConnected", py.get_type::<NotConnected>()),
        ("TooLarge", py.get_type::<TooLarge>()),
        ("RefusedError", py.get_type::<RefusedError>()),
        ("NoResponders", py.get_type::<NoResponders>()),
    ] {
        m.add(name, e)?;
    }
    event::register(m)?;
    channel::register(m)?;
    client::register(m)?;
    Ok(())
}
