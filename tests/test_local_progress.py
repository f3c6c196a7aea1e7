"""The embedded model's no-progress limit (models/local/progress.py) against a scripted `/slots`:
work is seen only once per poll interval, so a limit shorter than a few intervals must not end a call
the server is working on; a server whose slots sit idle still ends the call."""

from __future__ import annotations

import asyncio
import time

import pytest

from skillopt.models.local.progress import NoProgress, ServerProgress, within_progress

POLL_S = 0.5


def slots_reader(working: bool, answer_s: float = 0.05):
    async def read(url: str, timeout_s: float):
        await asyncio.sleep(answer_s)  # /slots answers between decode steps: never at once
        return [{"id": 0, "id_task": 1, "is_processing": working, "n_prompt_tokens_processed": 10}]
    return read


async def reply_after(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


def test_a_limit_shorter_than_the_poll_interval_does_not_end_calls_the_server_is_working_on():
    """Two calls, begun 0.3 s apart, share one reader: the later call's poll is skipped (the other read
    within the interval), so the work it sees is up to an interval old. With the 0.1 s limit taken
    literally that call ends as no progress though the server never stopped working."""
    progress = ServerProgress("http://127.0.0.1:1", slots_reader(working=True), poll_s=POLL_S)

    async def both():
        async def later():
            await asyncio.sleep(0.3)
            return await within_progress(reply_after(2.5), progress, limit_s=0.1)

        return await asyncio.gather(within_progress(reply_after(2.5), progress, limit_s=0.1), later())

    assert asyncio.run(both()) == ["done", "done"]


def test_a_server_whose_slots_sit_idle_ends_the_call_after_the_raised_limit():
    progress = ServerProgress("http://127.0.0.1:1", slots_reader(working=False), poll_s=POLL_S)
    began = time.monotonic()
    with pytest.raises(NoProgress, match="no progress on the server"):
        asyncio.run(within_progress(reply_after(30.0), progress, limit_s=0.1))
    waited = time.monotonic() - began
    assert 4 * POLL_S <= waited < 10 * POLL_S  # MIN_POLLS intervals, not the 0.1 s asked for
