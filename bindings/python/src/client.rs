//! `Client`: a router client (`ipc`, `tcp://HOST:PORT`, `tls://HOST:PORT`)
//! with subscriptions (wildcards, queue groups, durable), publishing
//! (direct, with headers, guaranteed, batched), requests and replies.

use crate::event::{of_client, wait, Message, TopicCache};
use crate::{
    check_open, deadline, seconds as duration, timeout as seconds, with_bytes, BackPressured, ClosedError, Error,
    NoResponders, NotConnected, RefusedError, Slot, TooLarge,
};
use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tickwire_client::{Client as Inner, ClientError, ClientEvent, ClientOptions, PublishError, RequestError};
use tickwire_topic::Pattern;

fn client_error(e: ClientError) -> PyErr {
    match &e {
        ClientError::Uri(_) | ClientError::Topic(_) => PyValueError::new_err(e.to_string()),
        ClientError::Refused { .. } => RefusedError::new_err(e.to_string()),
        ClientError::Timeout { .. } => PyTimeoutError::new_err(e.to_string()),
        _ => Error::new_err(e.to_string()),
    }
}

fn publish_error(e: PublishError) -> PyErr {
    match &e {
        PublishError::NotConnected => NotConnected::new_err(e.to_string()),
        PublishError::BackPressured | PublishError::WindowFull(_) => BackPressured::new_err(e.to_string()),
        PublishError::TooLarge { .. } => TooLarge::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// The client and the events taken from it but not handed out yet (one
/// poll's extra, or what came while `request` waited for its reply).
struct Held {
    client: Inner,
    ready: VecDeque<Py<PyAny>>,
    topics: TopicCache,
    /// Each live subscription's pattern, for `Client.messages(id)`.
    patterns: HashMap<u32, Pattern>,
}

impl Held {
    fn next(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.ready.is_empty() {
            self.poll(py, 16)?;
        }
        Ok(self.ready.pop_front())
    }

    /// The next message subscription `sid`'s pattern matches, taken from
    /// `ready` (polling once if none is there); other events stay there.
    fn next_for(&mut self, py: Python<'_>, sid: u32) -> PyResult<Option<Py<PyAny>>> {
        if !self.patterns.contains_key(&sid) {
            return Err(ClosedError::new_err(format!("subscription {sid} is not open")));
        }
        if let Some(m) = self.take_matching(py, sid, 0) {
            return Ok(Some(m));
        }
        let from = self.ready.len();
        self.poll(py, 16)?;
        Ok(self.take_matching(py, sid, from))
    }

    /// The first message in `ready` from index `from` on that `sid`'s
    /// pattern matches, taken out.
    fn take_matching(&mut self, py: Python<'_>, sid: u32, from: usize) -> Option<Py<PyAny>> {
        let pattern = self.patterns.get(&sid)?;
        let at = self
            .ready
            .iter()
            .skip(from)
            .position(|e| e.bind(py).cast::<Message>().is_ok_and(|m| m.get().topic_matches(py, pattern)))?;
        self.ready.remove(from + at)
    }

    fn poll(&mut self, py: Python<'_>, max: usize) -> PyResult<()> {
        let Held { client, ready, topics, .. } = self;
        let mut failed = None;
        client.poll(
            |e| match of_client(py, topics, &e) {
                Ok(o) => ready.push_back(o),
                Err(err) => failed = Some(err),
            },
            max,
        );
        failed.map_or(Ok(()), Err)
    }

    /// Publishes, flushing and retrying while the client's buffer is full,
    /// for up to `timeout` (the clock read only once it was full).
    fn publish(
        &mut self,
        py: Python<'_>,
        closing: &AtomicBool,
        timeout: Option<Duration>,
        mut send: impl FnMut(&mut Inner) -> Result<(), PublishError>,
    ) -> PyResult<()> {
        let mut until: Option<Option<Instant>> = None;
        loop {
            match send(&mut self.client) {
                Err(PublishError::BackPressured) => {
                    let _ = self.client.flush();
                    // Reading keeps the router writing (and us from
                    // deadlocking with a router that waits for us).
                    self.poll(py, 64)?;
                    let until = *until.get_or_insert_with(|| deadline(timeout));
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return Err(publish_error(PublishError::BackPressured));
                    }
                    py.detach(|| std::thread::sleep(Duration::from_micros(20)));
                    py.check_signals()?;
                    check_open(closing)?;
                }
                r => return r.map_err(publish_error),
            }
        }
    }
}

impl Held {
    /// Waits for the router's welcome for up to `timeout` (`None`: for
    /// ever), one frame at a time into `ready`: every event on the way
    /// (`Connected` among them) stays for `receive`. The GIL is released
    /// while parked, signals checked between slices.
    fn wait_connected(&mut self, py: Python<'_>, closing: &AtomicBool, timeout: Option<Duration>) -> PyResult<()> {
        let until = deadline(timeout);
        while !self.client.is_connected() {
            if let Some(why) = self.client.refused() {
                return Err(RefusedError::new_err(format!("{}: {why}", self.client.uri())));
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                let last = self.client.last_error();
                let last = if last.is_empty() { String::new() } else { format!(" (last: {last})") };
                return Err(PyTimeoutError::new_err(format!(
                    "not connected to {} within {timeout:?}{last}",
                    self.client.uri()
                )));
            }
            self.poll(py, 1)?;
            if !self.client.is_connected() {
                py.detach(|| std::thread::sleep(Duration::from_micros(200)));
                py.check_signals()?;
                check_open(closing)?;
            }
        }
        Ok(())
    }
}

/// `(name, value)` pairs from a mapping or an iterable of pairs.
fn pairs(h: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    let items = if h.is_instance_of::<pyo3::types::PyDict>() { h.call_method0("items")? } else { h.clone() };
    items.try_iter()?.map(|kv| kv?.extract::<(String, String)>()).collect()
}

/// A router client. `Client(uri, ...)` connects and waits up to `timeout`
/// seconds for the router's welcome (0: not at all, `None`: for ever); the
/// `Connected` event and any other that came with it stay for `receive`.
/// It reconnects by
/// itself after a loss. Events (`Message`, `Request`, `Reply`, ...) come
/// from `receive`, `poll`, `for event in client` and
/// `async for event in client`.
#[pyclass(module = "tickwire")]
pub struct Client {
    c: Slot<Held>,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (uri, *, name = None, dir = None, user = None, password = None, tls_ca = None, tls_cert = None, tls_key = None, echo = true, timeout = Some(5.0)))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        uri: &str,
        name: Option<String>,
        dir: Option<std::path::PathBuf>,
        user: Option<String>,
        password: Option<String>,
        tls_ca: Option<std::path::PathBuf>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
        echo: bool,
        timeout: Option<f64>,
    ) -> PyResult<Self> {
        let mut opts = ClientOptions::default();
        if let Some(n) = name {
            opts.name = n;
        }
        if let Some(d) = dir {
            opts.dir = d;
        }
        (opts.user, opts.password, opts.tls_ca, opts.tls_cert, opts.tls_key, opts.echo) =
            (user, password, tls_ca, tls_cert, tls_key, echo);
        let wait = seconds(timeout)?;
        let client = py.detach(|| Inner::connect(uri, opts)).map_err(client_error)?;
        let mut held = Held { client, ready: VecDeque::new(), topics: TopicCache::default(), patterns: HashMap::new() };
        if wait != Some(Duration::ZERO) {
            held.wait_connected(py, &AtomicBool::new(false), wait)?;
        }
        Ok(Self { c: Slot::new("client", held) })
    }

    /// Whether the router has welcomed this client (and not lost it since).
    #[getter]
    fn is_connected(&self) -> PyResult<bool> {
        self.c.with(|h| Ok(h.client.is_connected()))
    }

    /// Waits up to `timeout` seconds (`None`: for ever) for the router's
    /// welcome; the events on the way stay for `receive`.
    #[pyo3(signature = (timeout = Some(5.0)))]
    fn wait_connected(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let wait = seconds(timeout)?;
        self.c.with(|h| h.wait_connected(py, self.c.closing(), wait))
    }

    /// Subscribes to `pattern` (`*` one level, `>` the rest), as a member
    /// of queue group `group` if given, or with the topic's cached last
    /// value first (`cached=True`); its id.
    #[pyo3(signature = (pattern, group = None, cached = false))]
    fn subscribe(&self, pattern: &str, group: Option<&str>, cached: bool) -> PyResult<u32> {
        self.c.with(|h| {
            let sid = match (group, cached) {
                (Some(g), false) => h.client.subscribe_queue(pattern, g),
                (None, true) => h.client.subscribe_cached(pattern),
                (None, false) => h.client.subscribe(pattern),
                (Some(_), true) => return Err(PyValueError::new_err("a queue group member takes no cached value")),
            }
            .map_err(client_error)?;
            h.remember(sid, pattern);
            Ok(sid)
        })
    }

    /// A durable subscription `name` to `pattern` (guaranteed delivery,
    /// kept by the router; acknowledge with `ack`); its id.
    fn subscribe_durable(&self, pattern: &str, name: &str) -> PyResult<u32> {
        self.c.with(|h| {
            let sid = h.client.subscribe_durable(pattern, name).map_err(client_error)?;
            h.remember(sid, pattern);
            Ok(sid)
        })
    }

    /// Ends subscription `id` (its `messages` iterator ends too).
    fn unsubscribe(&self, id: u32) -> PyResult<()> {
        self.c.with(|h| {
            h.client.unsubscribe(id);
            h.patterns.remove(&id);
            Ok(())
        })
    }

    /// The messages of subscription `id` alone (those its pattern
    /// matches), as an iterator and an async iterator, with
    /// `receive(timeout)`; every other event waits for `receive`, `poll`
    /// or another subscription's iterator. A message two of this client's
    /// patterns match (the router sends it once) goes to whichever reads
    /// first.
    fn messages(slf: Py<Self>, id: u32) -> Messages {
        Messages { client: slf, id }
    }

    /// Publishes `payload` (bytes, bytearray, memoryview) on `topic`, with
    /// `headers` (`(name, value)` pairs or a dict) if given. Batched: it
    /// leaves with the next `flush`, a full buffer or a wait (`receive`).
    /// Waits up to `timeout` seconds while the client's buffer is full.
    #[pyo3(signature = (topic, payload, headers = None, timeout = 1.0))]
    fn publish(
        &self,
        py: Python<'_>,
        topic: &str,
        payload: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let timeout = seconds(timeout)?;
        let headers = headers.map(pairs).transpose()?;
        self.c.with(|h| {
            with_bytes(payload, |msg| match &headers {
                None => h.publish(py, self.c.closing(), timeout, |c| c.publish(topic, msg)),
                Some(hs) => {
                    let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    h.publish(py, self.c.closing(), timeout, |c| c.publish_with_headers(topic, &hs, msg))
                }
            })?
        })
    }

    /// Publishes every payload of `payloads` on `topic`, in order, and
    /// flushes; how many. An error raised part way carries how many went
    /// before it as its `published` attribute.
    #[pyo3(signature = (topic, payloads, timeout = 1.0))]
    fn publish_many(
        &self,
        py: Python<'_>,
        topic: &str,
        payloads: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let timeout = seconds(timeout)?;
        self.c.with(|h| {
            let mut n = 0;
            let closing = self.c.closing();
            let mut each = || -> PyResult<()> {
                for payload in payloads.try_iter()? {
                    with_bytes(&payload?, |msg| h.publish(py, closing, timeout, |c| c.publish(topic, msg)))??;
                    n += 1;
                }
                h.client.flush().map_err(publish_error)
            };
            let r = each();
            r.map_err(|e| crate::with_published(py, e, n)).map(|()| n)
        })
    }

    /// Publishes with guaranteed delivery (the router journals it and
    /// acknowledges); its sequence. `acknowledged` says how far the router
    /// has acknowledged.
    fn publish_guaranteed(&self, topic: &str, payload: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.c.with(|h| with_bytes(payload, |msg| h.client.publish_guaranteed(topic, msg))?.map_err(publish_error))
    }

    /// The highest guaranteed sequence the router has acknowledged.
    #[getter]
    fn acknowledged(&self) -> PyResult<u64> {
        self.c.with(|h| Ok(h.client.acknowledged()))
    }

    /// The number the next direct publish gets (numbered from 0, as a
    /// `PublishGap` names them).
    #[getter]
    fn published(&self) -> PyResult<u64> {
        self.c.with(|h| Ok(h.client.published()))
    }

    /// Acknowledges a guaranteed `Message` (its `subscription`, `sequence`).
    fn ack(&self, subscription: u32, sequence: u64) -> PyResult<()> {
        self.c.with(|h| {
            h.client.ack(subscription, sequence);
            Ok(())
        })
    }

    /// Sends what is buffered now.
    fn flush(&self) -> PyResult<()> {
        self.c.with(|h| h.client.flush().map_err(publish_error))
    }

    /// Sends a request; its id, which its `Reply` or `RequestFailed`
    /// names (from `receive`).
    #[pyo3(signature = (topic, payload, timeout = 1.0))]
    fn send_request(&self, topic: &str, payload: &Bound<'_, PyAny>, timeout: f64) -> PyResult<u64> {
        let t = duration("timeout", timeout)?;
        self.c.with(|h| with_bytes(payload, |msg| h.client.send_request(topic, msg, t))?.map_err(publish_error))
    }

    /// Sends a request and waits up to `timeout` seconds for its reply's
    /// payload. `NoResponders`, `TimeoutError`, `NotConnected` or
    /// `RefusedError` when none comes; other events that come meanwhile
    /// wait for `receive`.
    #[pyo3(signature = (topic, payload, timeout = 1.0))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        payload: &Bound<'_, PyAny>,
        timeout: f64,
    ) -> PyResult<Py<PyBytes>> {
        let t = duration("timeout", timeout)?;
        self.c.with(|h| {
            let id = with_bytes(payload, |msg| h.client.send_request(topic, msg, t))?.map_err(publish_error)?;
            let _ = h.client.flush();
            // Past the request's own timeout, it fails by itself.
            let mut outcome = None;
            let got = wait(
                py,
                h,
                self.c.closing(),
                t.checked_add(Duration::from_secs(1)),
                |py, h| {
                    let Held { client, ready, topics, .. } = h;
                    let mut failed = None;
                    client.poll(
                        |e| match e {
                            ClientEvent::Reply { request, payload, .. } if request == id => {
                                outcome = Some(Ok(PyBytes::new(py, payload).unbind()));
                            }
                            ClientEvent::RequestFailed { request, why } if request == id => outcome = Some(Err(why)),
                            other => match of_client(py, topics, &other) {
                                Ok(o) => ready.push_back(o),
                                Err(err) => failed = Some(err),
                            },
                        },
                        16,
                    );
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    Ok(outcome.take())
                },
                |h, d| h.client.park(d),
            )?;
            match got {
                Some(Ok(reply)) => Ok(reply),
                Some(Err(RequestError::NoResponders)) => {
                    Err(NoResponders::new_err(format!("no responders on {topic}")))
                }
                Some(Err(RequestError::TimedOut)) | None => {
                    Err(PyTimeoutError::new_err(format!("no reply on {topic} within {timeout} s")))
                }
                Some(Err(RequestError::Disconnected)) => {
                    Err(NotConnected::new_err("the connection to the router was lost before the reply"))
                }
                Some(Err(e @ RequestError::Refused(_))) => Err(RefusedError::new_err(e.to_string())),
            }
        })
    }

    /// Answers a `Request` on its `inbox`.
    fn reply(&self, inbox: &str, payload: &Bound<'_, PyAny>) -> PyResult<()> {
        self.c.with(|h| with_bytes(payload, |msg| h.client.reply(inbox, msg))?.map_err(publish_error))
    }

    /// The next event, waiting up to `timeout` seconds (`None`: for ever,
    /// 0: look once); `None` if none came. What was published leaves
    /// first.
    #[pyo3(signature = (timeout = None))]
    fn receive(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let timeout = seconds(timeout)?;
        self.c.with(|h| wait(py, h, self.c.closing(), timeout, |py, h| h.next(py), |h, d| h.client.park(d)))
    }

    /// Every event there now, up to `max`, without waiting.
    #[pyo3(signature = (max = 256))]
    fn poll<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyList>> {
        self.c.with(|h| {
            if h.ready.len() < max {
                h.poll(py, max - h.ready.len())?;
            }
            let out = PyList::empty(py);
            while out.len() < max {
                match h.ready.pop_front() {
                    Some(e) => out.append(e)?,
                    None => break,
                }
            }
            Ok(out)
        })
    }

    /// Says goodbye to the router once what was published has left
    /// (TCP: up to 5 s), and closes. Using the client afterwards raises
    /// `ClosedError`.
    fn close(&self, py: Python<'_>) {
        if let Some(h) = self.c.take() {
            py.detach(|| h.client.close());
        }
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next event, waiting for ever; the end once closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        crate::until_closed(py, self.receive(py, None))
    }

    /// `async for event in client` (tickwire.aio).
    fn __aiter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aiter(slf.into_any())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.close(py);
    }
}

/// The messages of one subscription of a `Client` (`Client.messages(id)`).
#[pyclass(module = "tickwire", frozen)]
pub struct Messages {
    client: Py<Client>,
    id: u32,
}

#[pymethods]
impl Messages {
    /// The subscription's id.
    #[getter]
    fn id(&self) -> u32 {
        self.id
    }

    /// Its next message, waiting up to `timeout` seconds (`None`: for
    /// ever, 0: look once); `None` if none came. `ClosedError` once the
    /// client is closed or the subscription ended.
    #[pyo3(signature = (timeout = None))]
    fn receive(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let timeout = seconds(timeout)?;
        let client = self.client.bind(py).borrow();
        let (c, id) = (&client.c, self.id);
        c.with(|h| wait(py, h, c.closing(), timeout, |py, h| h.next_for(py, id), |h, d| h.client.park(d)))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next message, waiting for ever; the end once the client is
    /// closed or the subscription ended.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        crate::until_closed(py, self.receive(py, None))
    }

    /// `async for message in client.messages(id)` (tickwire.aio).
    fn __aiter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aiter(slf.into_any())
    }
}

impl Held {
    fn remember(&mut self, sid: u32, pattern: &str) {
        if let Ok(p) = Pattern::parse(pattern) {
            self.patterns.insert(sid, p);
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<Messages>()
}
