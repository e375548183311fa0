"""``async for`` over a ``Subscription`` or a ``Client`` (asyncio).

Each step first looks without waiting; when nothing is there, it waits in
the event loop's default executor (a thread, the GIL released while it
parks) for at most ``SLICE`` seconds, so the loop stays free and a
cancelled iteration ends within a slice. The iteration ends when the
source is closed.
"""

import asyncio

from ._tickwire import ClosedError

SLICE = 0.05


async def events(source, slice_s: float = SLICE):
    """Every event of ``source`` as it comes."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            event = source.receive(0)
            if event is None:
                event = await loop.run_in_executor(None, source.receive, slice_s)
        except ClosedError:
            return
        if event is not None:
            yield event
