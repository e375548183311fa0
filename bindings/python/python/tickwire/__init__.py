"""tickwire for Python: low-latency messaging.

* Channels without a router: ``Context(dir).publication("ipc:NAME")`` and
  ``.subscription("ipc:NAME")`` over shared memory, or ``udp://HOST:PORT``
  (reliable UDP, multicast).
* A router client: ``Client("tcp://127.0.0.1:7600")`` (or ``ipc``,
  ``tls://``): topics with ``*`` and ``>`` wildcards on ``/``-separated levels, queue groups, durable
  subscriptions, requests and replies, headers, guaranteed delivery.

Waiting calls (``receive``, ``request``, iteration) poll for 50 µs with the
GIL held, then park with it released. Events are objects (``Message``,
``Request``, ``Reply``, ...); errors are exceptions under ``Error``. An object
used after ``close()`` raises ``ClosedError``. docs/python.md walks through it.
"""

from ._tickwire import (
    BackPressured,
    BusyError,
    Client,
    ClosedError,
    Connected,
    Context,
    Disconnected,
    Ended,
    Error,
    Joined,
    Lost,
    PublishGap,
    Message,
    Messages,
    NoResponders,
    NotConnected,
    Publication,
    PublisherGone,
    RefusedError,
    Rejected,
    Reply,
    Request,
    RequestFailed,
    StreamLost,
    Subscription,
    TooLarge,
    __version__,
)

__all__ = [
    "BackPressured",
    "BusyError",
    "Client",
    "ClosedError",
    "Connected",
    "Context",
    "Disconnected",
    "Ended",
    "Error",
    "Joined",
    "Lost",
    "PublishGap",
    "Message",
    "Messages",
    "NoResponders",
    "NotConnected",
    "Publication",
    "PublisherGone",
    "RefusedError",
    "Rejected",
    "Reply",
    "Request",
    "RequestFailed",
    "StreamLost",
    "Subscription",
    "TooLarge",
    "__version__",
]
