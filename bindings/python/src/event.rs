//! What channels and clients hand to Python: a `Message`, and one frozen
//! class for each other event, and how a call waits for one.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::time::{Duration, Instant};
use tickwire_client::{ClientEvent, Headers, RequestError};
use tickwire_driver::Event;

/// How long a waiting call polls with the GIL held before it parks with
/// the GIL released: a reply within this comes at polling latency.
pub(crate) const SPIN: Duration = Duration::from_micros(50);
/// How many looks a spinning wait makes between two clock reads.
const SPINS_PER_CLOCK_READ: u32 = 16;
/// The longest park between two looks at Python's signals (Ctrl-C).
pub(crate) const PARK_SLICE: Duration = Duration::from_millis(20);

/// Waits for `next` to give something, for up to `timeout` (`None`: for
/// ever): polling with the GIL held for `SPIN`, then `park` with it
/// released, in slices, Python's signals checked between them. The clock
/// is read only after a first look found nothing.
pub(crate) fn wait<S: Send, T>(
    py: Python<'_>,
    state: &mut S,
    closing: &std::sync::atomic::AtomicBool,
    timeout: Option<Duration>,
    mut next: impl FnMut(Python<'_>, &mut S) -> PyResult<Option<T>>,
    park: impl Fn(&mut S, Duration) + Sync,
) -> PyResult<Option<T>> {
    if let Some(v) = next(py, state)? {
        return Ok(Some(v));
    }
    if timeout == Some(Duration::ZERO) {
        return Ok(None);
    }
    let until = crate::deadline(timeout);
    let spin_until = Instant::now() + SPIN;
    let mut tries = 0u32;
    loop {
        if let Some(v) = next(py, state)? {
            return Ok(Some(v));
        }
        // While spinning, the clock is read once every SPINS_PER_CLOCK_READ
        // looks: a read costs as much as a look.
        tries = tries.wrapping_add(1);
        if tries % SPINS_PER_CLOCK_READ != 0 {
            std::hint::spin_loop();
            continue;
        }
        crate::check_open(closing)?;
        let now = Instant::now();
        if until.is_some_and(|u| now >= u) {
            return Ok(None);
        }
        if now < spin_until {
            continue;
        }
        let slice = until.map_or(PARK_SLICE, |u| (u - now).min(PARK_SLICE));
        py.detach(|| park(state, slice));
        py.check_signals()?;
        crate::check_open(closing)?;
    }
}

/// A message: from a channel (`sequence` is its stream position,
/// `session_id` its publisher's session) or from the router (`sequence`
/// the client's delivery sequence, or the journal's for a guaranteed one).
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Message {
    /// Its topic (`""`: none).
    topic: Py<PyString>,
    /// Its payload.
    payload: Py<PyBytes>,
    /// Its headers as `(name, value)` pairs, if its publisher gave any.
    headers: Option<Vec<(String, String)>>,
    /// See the class.
    sequence: u64,
    /// The router's flags (`CACHED` 0x01, `GUARANTEED` ...), 0 on a channel.
    flags: u8,
    /// Messages for this client the router dropped just before this one.
    discarded: u32,
    /// A guaranteed delivery's durable subscription (acknowledge with
    /// `Client.ack(subscription, sequence)`).
    subscription: Option<u32>,
    /// A guaranteed delivery's delivery count (1 the first time).
    deliveries: u32,
    /// A channel message's publisher session.
    session_id: Option<u32>,
}

impl Message {
    /// Whether `pattern` matches its topic (read in place, no copy).
    pub(crate) fn topic_matches(&self, py: Python<'_>, pattern: &tickwire_topic::Pattern) -> bool {
        self.topic.bind(py).to_str().is_ok_and(|t| pattern.matches(t))
    }
}

#[pymethods]
impl Message {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Message(topic={:?}, payload={} bytes, sequence={})",
            self.topic.bind(py),
            self.payload.bind(py).as_bytes().len(),
            self.sequence
        )
    }
}

/// A request for this client to answer: `Client.reply(request.inbox, ...)`.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Request {
    topic: String,
    payload: Py<PyBytes>,
    headers: Option<Vec<(String, String)>>,
    /// Where the reply goes.
    inbox: String,
    discarded: u32,
}

/// The reply to request `request` (`Client.send_request`'s id).
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Reply {
    request: u64,
    payload: Py<PyBytes>,
    headers: Option<Vec<(String, String)>>,
}

/// Request `request` will get no reply: `why` is `"no responders"`,
/// `"timed out"`, `"disconnected"` or `"refused: CODE"`.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct RequestFailed {
    request: u64,
    why: String,
}

/// The router accepted this client (at the start and after every
/// reconnection; subscriptions were sent again).
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Connected {
    router: String,
    client_id: u32,
}

/// The connection to the router was lost; the client reconnects.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Disconnected {
    reason: String,
}

/// The router refused a request (`code`, e.g. `"Forbidden"`) for
/// subscription or publish `request`; the session goes on.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Rejected {
    code: String,
    request: u64,
    reason: String,
}

/// Journal sequences `first..=last` that durable subscription
/// `subscription` will never receive (retention removed them first).
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Lost {
    subscription: u32,
    first: u64,
    last: u64,
}

/// Direct publishes numbered `first..=last` (`Client.published`) went on a
/// TCP connection lost before the router confirmed reading them: some or
/// all may have reached no subscriber. Comes right after `Disconnected`.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct PublishGap {
    first: u64,
    last: u64,
}

/// A channel: publisher session `session_id` joined at `position`.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Joined {
    session_id: u32,
    position: u64,
}

/// A channel: stream bytes `[start, end)` of `session_id` will never be
/// delivered (the subscriber fell behind, or the network lost them).
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct StreamLost {
    session_id: u32,
    start: u64,
    end: u64,
}

/// A channel: session `session_id` ended at `position` (closed by its
/// publisher).
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct Ended {
    session_id: u32,
    position: u64,
}

/// A channel: the publisher of `session_id` is gone without closing
/// (`reason`: died or silent); nothing more comes after `position`.
#[pyclass(module = "tickwire", frozen, get_all)]
pub struct PublisherGone {
    session_id: u32,
    position: u64,
    reason: String,
}

/// The last topic made into a Python string, made again only when it
/// changes (a subscriber of one topic makes it once).
#[derive(Default)]
pub(crate) struct TopicCache(Option<(String, Py<PyString>)>);

impl TopicCache {
    fn get(&mut self, py: Python<'_>, topic: &str) -> Py<PyString> {
        if topic.is_empty() {
            return pyo3::intern!(py, "").clone().unbind();
        }
        match &self.0 {
            Some((t, s)) if t == topic => s.clone_ref(py),
            _ => {
                let s = PyString::new(py, topic).unbind();
                self.0 = Some((topic.to_owned(), s.clone_ref(py)));
                s
            }
        }
    }
}

fn pairs(h: Option<Headers<'_>>) -> Option<Vec<(String, String)>> {
    h.map(|h| h.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
}

fn object<T: pyo3::PyClass + Into<pyo3::PyClassInitializer<T>>>(py: Python<'_>, v: T) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, v)?.into_any())
}

/// A channel's event as a Python object.
pub(crate) fn of_channel(py: Python<'_>, topics: &mut TopicCache, e: &Event<'_>) -> PyResult<Py<PyAny>> {
    match *e {
        Event::Message(m) => object(
            py,
            Message {
                topic: topics.get(py, m.topic),
                payload: PyBytes::new(py, m.payload).unbind(),
                headers: None,
                sequence: m.position,
                flags: 0,
                discarded: 0,
                subscription: None,
                deliveries: 0,
                session_id: Some(m.session_id),
            },
        ),
        Event::Joined { session_id, position } => object(py, Joined { session_id, position }),
        Event::Lost { session_id, from, to } => object(py, StreamLost { session_id, start: from, end: to }),
        Event::Ended { session_id, position } => object(py, Ended { session_id, position }),
        Event::PublisherGone { session_id, position, reason } => {
            object(py, PublisherGone { session_id, position, reason: reason.to_string() })
        }
    }
}

fn failure(why: &RequestError) -> String {
    match why {
        RequestError::NoResponders => "no responders".into(),
        RequestError::TimedOut => "timed out".into(),
        RequestError::Disconnected => "disconnected".into(),
        RequestError::Refused(code) => format!("refused: {code:?}"),
    }
}

/// A router client's event as a Python object.
pub(crate) fn of_client(py: Python<'_>, topics: &mut TopicCache, e: &ClientEvent<'_>) -> PyResult<Py<PyAny>> {
    match *e {
        ClientEvent::Message(d) => object(
            py,
            Message {
                topic: topics.get(py, d.topic),
                payload: PyBytes::new(py, d.payload).unbind(),
                headers: pairs(d.headers),
                sequence: d.sequence,
                flags: d.flags,
                discarded: d.discarded,
                subscription: d.subscription,
                deliveries: d.deliveries,
                session_id: None,
            },
        ),
        ClientEvent::Request(r) => object(
            py,
            Request {
                topic: r.topic.to_owned(),
                payload: PyBytes::new(py, r.payload).unbind(),
                headers: pairs(r.headers),
                inbox: r.inbox.to_owned(),
                discarded: r.discarded,
            },
        ),
        ClientEvent::Reply { request, payload, headers } => {
            object(py, Reply { request, payload: PyBytes::new(py, payload).unbind(), headers: pairs(headers) })
        }
        ClientEvent::RequestFailed { request, why } => object(py, RequestFailed { request, why: failure(&why) }),
        ClientEvent::Connected { router, client_id } => object(py, Connected { router: router.to_owned(), client_id }),
        ClientEvent::Disconnected { reason } => object(py, Disconnected { reason: reason.to_owned() }),
        ClientEvent::Rejected { code, request, reason } => {
            object(py, Rejected { code: format!("{code:?}"), request, reason: reason.to_owned() })
        }
        ClientEvent::Lost { subscription, from, to } => object(py, Lost { subscription, first: from, last: to }),
        ClientEvent::PublishGap { from, to } => object(py, PublishGap { first: from, last: to }),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Message>()?;
    m.add_class::<Request>()?;
    m.add_class::<Reply>()?;
    m.add_class::<RequestFailed>()?;
    m.add_class::<Connected>()?;
    m.add_class::<Disconnected>()?;
    m.add_class::<Rejected>()?;
    m.add_class::<Lost>()?;
    m.add_class::<PublishGap>()?;
    m.add_class::<Joined>()?;
    m.add_class::<StreamLost>()?;
    m.add_class::<Ended>()?;
    m.add_class::<PublisherGone>()?;
    Ok(())
}
