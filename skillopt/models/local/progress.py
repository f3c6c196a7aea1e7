"""A call to the embedded model times out on the model's progress, not on the wall clock.

On a CPU the local server answers its slots' requests in turn: a call may wait for a slot behind
rollouts, then take minutes to generate on a loaded machine. A wall-clock limit turns that wait into
`TimeoutError`s and lost optimizer steps. So a local call has no wall limit; it fails only when the
server has made no progress for the call's whole limit: while the call is open, the server's
`/slots` is read every few seconds (shared by every call to that server), and the limit restarts
each time the server answers with a slot at work (a prompt being read or tokens being generated:
llama.cpp answers between its decode steps) or with a slot whose counts moved. A server that stops
answering, or sits idle while the call is still open, runs the limit out.

Work is seen only when `/slots` is read (once per poll interval, shared by the calls) and answered
(between decode steps, which take seconds on a loaded CPU): a working server may go unseen for about
two intervals plus an answer. So a limit under `MIN_POLLS` intervals is raised to that many, lest one
late answer end a call the server is working on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
POLL_S = 3.0
MIN_POLLS = 4  # the shortest no-progress limit, in poll intervals


class NoProgress(Exception):
    """The server did no work for the whole limit while the call was open."""


class ServerProgress:
    """When the server at `base_url` was last seen at work. `read` fetches its `/slots` (a JSON list),
    or raises / returns None when it does not answer."""

    def __init__(self, base_url: str, read: Callable[[str, float], Awaitable[Any]], poll_s: float = POLL_S):
        self.base_url, self.read, self.poll_s = base_url, read, poll_s
        self.last_work = time.monotonic()
        self.last_poll = 0.0
        self._signature: object = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _polling_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # one lock per event loop (a run may start several)
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

    async def poll(self, answer_s: float) -> None:
        """Read `/slots` unless another call did within the poll interval; note work seen."""
        async with self._polling_lock():
            if time.monotonic() - self.last_poll < self.poll_s:
                return
            try:
                slots = await self.read(f"{self.base_url}/slots", answer_s)
            except Exception:  # noqa: BLE001 - no answer is no progress, whatever the reason
                slots = None
            self.last_poll = time.monotonic()
            if not isinstance(slots, list):
                return
            signature = work_signature(slots)
            if any(isinstance(s, dict) and s.get("is_processing") for s in slots) or signature != self._signature:
                self.last_work = self.last_poll
            self._signature = signature


def work_signature(slots: list[Any]) -> tuple:
    """What moves while a server works: per slot, its task, prompt tokens read and tokens generated."""
    out = []
    for s in slots:
        if not isinstance(s, dict):
            continue
        decoded = sum(int(t.get("n_decoded") or 0) for t in s.get("next_token") or [] if isinstance(t, dict))
        out.append((s.get("id"), s.get("id_task"), s.get("n_prompt_tokens_processed"), decoded))
    return tuple(out)


async def within_progress(call: Awaitable[T], progress: ServerProgress, limit_s: float) -> T:
    """`call`'s result; `NoProgress` (the call cancelled) once the server did no work for `limit_s`
    (at least `MIN_POLLS` poll intervals)."""
    limit_s = max(limit_s, MIN_POLLS * progress.poll_s)
    task = asyncio.ensure_future(call)
    began = time.monotonic()  # the server gets the call's whole limit from its start
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=progress.poll_s)
            if done:
                return task.result()
            await progress.poll(answer_s=max(progress.poll_s, min(limit_s, 60.0)))
            if task.done():
                return task.result()
            idle = time.monotonic() - max(began, progress.last_work)
            if idle > limit_s:
                raise NoProgress(f"no progress on the server for {idle:.0f} s (its /slots showed no work)")
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled on purpose
                pass


_PROGRESS: dict[str, ServerProgress] = {}


def progress_of(base_url: str, read: Callable[[str, float], Awaitable[Any]]) -> ServerProgress:
    """The one `ServerProgress` of a server (by its URL) in this process."""
    found = _PROGRESS.get(base_url)
    if found is None:
        found = _PROGRESS[base_url] = ServerProgress(base_url, read)
    return found
