"""Ending a loop's tasks before the loop itself ends."""

from __future__ import annotations

import asyncio


async def end_other_tasks() -> None:
    """Cancel every other task of the running loop and wait until each has ended: a handler
    left pending would be collected after its loop closed, its cleanup (a writer's close) then
    raising wherever the collector ran."""
    me = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not me]
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
