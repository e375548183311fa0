"""``async for`` over a ``Subscription`` or a ``Client`` (asyncio).

Each step looks without waiting (``receive(0)``, which holds the object
only for that look); when nothing is there it sleeps on the event loop,
``0`` at first, then longer, up to ``MAX_SLEEP`` seconds, and looks again.
So the object is free between looks (another task may publish on the
same client), nothing is taken from it that a cancelled step could lose,
and the loop is never blocked. The iteration ends when the object is
closed. An idle stream is looked at about once a millisecond; for the
lowest latency, poll from a thread of your own.
"""

import asyncio

from ._tickwire import ClosedError

MAX_SLEEP = 0.001


async def events(source, max_sleep: float = MAX_SLEEP):
    """Every event of ``source`` as it comes."""
    idle = 0
    while True:
        try:
            event = source.receive(0)
        except ClosedError:
            return
        if event is not None:
            idle = 0
            yield event
            continue
        # Yield to the loop a few times before sleeping for real.
        idle += 1
        await asyncio.sleep(0 if idle < 16 else min(max_sleep, 0.00005 * (idle - 15)))
