//! Channels without a router: `Context` (the shared-memory directory),
//! `Publication` and `Subscription` on `ipc:NAME` or reliable UDP
//! (`udp://HOST:PORT`, multicast), as `tickwire_driver` makes them.

use crate::event::{of_channel, wait, TopicCache, SPIN};
use crate::{
    check_open, deadline, seconds as duration, timeout as seconds, with_bytes, BackPressured, ClosedError, Error,
    NotConnected, Slot, TooLarge,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tickwire_driver::{Channel, OfferError, Publication as Pub, Subscription as Sub};
use tickwire_shm::Context as Ctx;

fn offer_error(e: OfferError) -> PyErr {
    match e {
        OfferError::BackPressured => BackPressured::new_err(e.to_string()),
        OfferError::NotConnected => NotConnected::new_err(e.to_string()),
        OfferError::Closed => ClosedError::new_err(e.to_string()),
        _ => TooLarge::new_err(e.to_string()),
    }
}

fn channel(uri: &str) -> PyResult<Channel> {
    uri.parse().map_err(|e| PyValueError::new_err(format!("{uri}: {e}")))
}

/// A tickwire directory: where shared-memory logs and counters are
/// (`None`: the default, `/dev/shm/tickwire-USER`, created `0700`).
#[pyclass(module = "tickwire")]
pub struct Context {
    ctx: Slot<Ctx>,
    dir: String,
}

#[pymethods]
impl Context {
    #[new]
    #[pyo3(signature = (dir = None))]
    fn new(dir: Option<std::path::PathBuf>) -> PyResult<Self> {
        let dir = dir.unwrap_or_else(tickwire_shm::default_dir);
        let ctx = Ctx::new(&dir).map_err(|e| Error::new_err(format!("{}: {e}", dir.display())))?;
        Ok(Self { ctx: Slot::new("context", ctx), dir: dir.display().to_string() })
    }

    /// The directory.
    #[getter]
    fn dir(&self) -> &str {
        &self.dir
    }

    /// A publication on `channel` (`ipc:NAME`, `udp://HOST:PORT`, ...),
    /// stream `stream`.
    #[pyo3(signature = (channel, stream = 1))]
    fn publication(&self, channel: &str, stream: u32) -> PyResult<Publication> {
        let ch = self::channel(channel)?;
        let p =
            self.ctx.with(|ctx| Pub::open(ctx, &ch, stream).map_err(|e| Error::new_err(format!("{channel}: {e}"))))?;
        Ok(Publication { p: Slot::new("publication", p) })
    }

    /// A subscription on `channel`, stream `stream`. Over shared memory
    /// the stream's publication must exist (`Error` until it does).
    #[pyo3(signature = (channel, stream = 1))]
    fn subscription(&self, channel: &str, stream: u32) -> PyResult<Subscription> {
        let ch = self::channel(channel)?;
        let s =
            self.ctx.with(|ctx| Sub::open(ctx, &ch, stream).map_err(|e| Error::new_err(format!("{channel}: {e}"))))?;
        Ok(Subscription {
            s: Slot::new("subscription", Held { sub: s, ready: VecDeque::new(), topics: TopicCache::default() }),
        })
    }

    /// Closes the context (its publications and subscriptions stay usable).
    fn close(&self) {
        drop(self.ctx.take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.close();
    }
}

/// A publication: `offer` (raises `BackPressured` when there is no room),
/// `publish` (waits for room), `publish_many`.
#[pyclass(module = "tickwire")]
pub struct Publication {
    p: Slot<Pub>,
}

/// Offers `msg` until there is room or `timeout` passes (GIL held while
/// spinning, released while sleeping); the clock is read only once the
/// first offer was refused.
fn offer_until(
    py: Python<'_>,
    closing: &AtomicBool,
    p: &mut Pub,
    topic: Option<&str>,
    msg: &[u8],
    timeout: Option<Duration>,
) -> PyResult<u64> {
    let mut times: Option<(Option<Instant>, Instant)> = None;
    loop {
        let r = match topic {
            Some(t) => p.offer_topic(t, msg),
            None => p.offer(msg),
        };
        match r {
            Ok(at) => return Ok(at),
            Err(OfferError::BackPressured | OfferError::NotConnected) => {
                p.do_work();
                let now = Instant::now();
                let (until, spin_until) = *times.get_or_insert_with(|| (deadline(timeout), now + SPIN));
                if until.is_some_and(|u| now >= u) {
                    return Err(r.map_err(offer_error).unwrap_err());
                }
                if now >= spin_until {
                    py.detach(|| std::thread::sleep(Duration::from_micros(20)));
                    py.check_signals()?;
                    check_open(closing)?;
                }
            }
            Err(e) => return Err(offer_error(e)),
        }
    }
}

#[pymethods]
impl Publication {
    /// Offers `payload` (bytes, bytearray, memoryview) once, with `topic`;
    /// the stream position after it. `BackPressured` or `NotConnected` when it
    /// cannot go now.
    #[pyo3(signature = (payload, topic = None))]
    fn offer(&self, payload: &Bound<'_, PyAny>, topic: Option<&str>) -> PyResult<u64> {
        self.p.with(|p| {
            with_bytes(payload, |msg| match topic {
                Some(t) => p.offer_topic(t, msg),
                None => p.offer(msg),
            })?
            .map_err(offer_error)
        })
    }

    /// Publishes `payload`, waiting up to `timeout` seconds (`None`: for
    /// ever) for room; the stream position after it.
    #[pyo3(signature = (payload, topic = None, timeout = 1.0))]
    fn publish(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        topic: Option<&str>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let timeout = seconds(timeout)?;
        self.p.with(|p| with_bytes(payload, |msg| offer_until(py, self.p.closing(), p, topic, msg, timeout))?)
    }

    /// Publishes every payload of `payloads` in order, each waiting up to
    /// `timeout` seconds for room; how many were published. An error
    /// raised part way carries that count as its `published` attribute.
    #[pyo3(signature = (payloads, topic = None, timeout = 1.0))]
    fn publish_many(
        &self,
        py: Python<'_>,
        payloads: &Bound<'_, PyAny>,
        topic: Option<&str>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let timeout = seconds(timeout)?;
        self.p.with(|p| {
            let mut n = 0;
            let closing = self.p.closing();
            let mut each = || -> PyResult<()> {
                for payload in payloads.try_iter()? {
                    with_bytes(&payload?, |msg| offer_until(py, closing, p, topic, msg, timeout))??;
                    n += 1;
                }
                Ok(())
            };
            let r = each();
            r.map_err(|e| crate::with_published(py, e, n)).map(|()| n)
        })
    }

    /// The duty cycle of a reliable UDP publication (status messages,
    /// retransmissions): call it while idle. The work done.
    fn do_work(&self) -> PyResult<usize> {
        self.p.with(|p| Ok(p.do_work()))
    }

    /// Whether a subscriber is attached (shared memory) or a receiver
    /// answers (UDP).
    #[getter]
    fn is_connected(&self) -> PyResult<bool> {
        self.p.with(|p| Ok(p.is_connected()))
    }

    /// Ends the stream, waiting up to `linger` seconds for reliable UDP
    /// receivers to have everything (`Error` if they did not; with no
    /// linger, nothing is waited for and nothing raised).
    #[pyo3(signature = (linger = 0.0))]
    fn close(&self, py: Python<'_>, linger: f64) -> PyResult<()> {
        let linger = duration("linger", linger)?;
        if let Some(p) = self.p.take() {
            let r = py.detach(|| p.close(linger));
            if !linger.is_zero() {
                r.map_err(|e| Error::new_err(e.to_string()))?;
            }
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) -> PyResult<()> {
        self.close(py, 0.0)
    }
}

/// A subscription and the events one poll made ready beyond the one
/// handed out.
struct Held {
    sub: Sub,
    ready: VecDeque<Py<PyAny>>,
    topics: TopicCache,
}

impl Held {
    /// The next event, polling the subscription once if none is ready.
    fn next(&mut self, py: Python<'_>, max: usize) -> PyResult<Option<Py<PyAny>>> {
        if self.ready.is_empty() {
            let Held { sub, ready, topics } = self;
            let mut failed = None;
            sub.poll(
                |e| match of_channel(py, topics, &e) {
                    Ok(o) => ready.push_back(o),
                    Err(err) => failed = Some(err),
                },
                max,
            )
            .map_err(|e| Error::new_err(e.to_string()))?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(self.ready.pop_front())
    }
}

/// A subscription: `receive` the next event (a `Message`, or `Joined`,
/// `StreamLost`, `Ended`, `PublisherGone`), `poll` what is there; also an
/// iterator and an async iterator of its events.
#[pyclass(module = "tickwire")]
pub struct Subscription {
    s: Slot<Held>,
}

#[pymethods]
impl Subscription {
    /// The next event, waiting up to `timeout` seconds (`None`: for ever,
    /// 0: look once); `None` if none came. Polls with the GIL held for
    /// 50 µs, then parks with it released.
    #[pyo3(signature = (timeout = None))]
    fn receive(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let timeout = seconds(timeout)?;
        self.s.with(|h| wait(py, h, self.s.closing(), timeout, |py, h| h.next(py, 16), |h, d| h.sub.park(d)))
    }

    /// Every event there now, up to `max`, without waiting.
    #[pyo3(signature = (max = 256))]
    fn poll<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyList>> {
        self.s.with(|h| {
            let mut out = Vec::new();
            while out.len() < max {
                match h.next(py, max - out.len()) {
                    Ok(Some(e)) => out.push(e),
                    Ok(None) => break,
                    Err(e) => {
                        // What was taken already waits for the next call.
                        for ev in out.into_iter().rev() {
                            h.ready.push_front(ev);
                        }
                        return Err(e);
                    }
                }
            }
            PyList::new(py, out)
        })
    }

    /// Closes the subscription (a wait in another thread ends with
    /// `ClosedError`, an iteration with its end).
    fn close(&self) {
        drop(self.s.take());
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next event, waiting for ever; the end once closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        crate::until_closed(py, self.receive(py, None))
    }

    /// `async for event in subscription` (tickwire.aio).
    fn __aiter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aiter(slf.into_any())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.close();
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Context>()?;
    m.add_class::<Publication>()?;
    m.add_class::<Subscription>()?;
    Ok(())
}
