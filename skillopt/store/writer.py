"""The grouped writer: a rollout's trace files and its rollouts.jsonl line, written off the event loop,
many rollouts per `write` and per `fsync` (group commit).

One background thread takes everything queued (it never waits to fill a group: while it writes and
syncs one group, the next one gathers), writes each rollout's trace file(s), then appends all the
group's record lines to rollouts.jsonl in one `write`, then (durability "group") calls `fsync` once on
rollouts.jsonl, and only then acknowledges the group: `save()` returns a future that is resolved then.

Durability (what `RolloutRunner` relies on: a rollout counts as done only once its future resolved):

- kill -9, a crash, Ctrl-C: every acknowledged record is kept, with its trace file, because the OS
  already has it (process death does not drop the page cache). Rollouts still in the queue were
  never acknowledged: they are not in rollouts.jsonl and a resumed run does them again.
- power loss, durability "group" (the default): acknowledged records are on disk (rollouts.jsonl was
  fsynced). Trace files are not fsynced one by one: a record may point at a trace file the kernel had
  not yet written back (Linux: up to `vm.dirty_expire_centisecs`, 30 s by default); readers say the
  trace is missing. The group in flight (at most the rollouts of one `fsync`, a few ms) is lost and
  re-run on resume.
- power loss, durability "none": no `fsync` at all; the last ~30 s of records may be lost and re-run.

Reading a run's rollouts through `RunStore` first waits for the writer (`flush`), so a process always
reads its own writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from skillopt.io.files import append_lines, write_new_text

Durability = Literal["group", "none"]


@dataclass(frozen=True)
class RolloutWrite:
    """One rollout's files: its record line for rollouts.jsonl and its trace files (run-relative)."""

    line: str  # one JSON object, no newline
    files: tuple[tuple[str, str], ...] = ()  # (relative path, text)


@dataclass
class _Pending:
    item: RolloutWrite
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


_STOP = object()


class GroupedWriter:
    """Appends records to one log (`log`, e.g. rollouts.jsonl) with their files under `root`."""

    def __init__(self, root: Path, log: Path, durability: Durability = "group", max_group: int = 512):
        self.root, self.log, self.durability, self.max_group = root, log, durability, max_group
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self.groups = 0  # groups written (one write and at most one fsync each)
        self.records = 0

    def save(self, item: RolloutWrite) -> concurrent.futures.Future:
        """Queue one rollout's writes; the future resolves once they are written (and synced)."""
        if self._error is not None:
            raise RuntimeError(f"the rollout writer failed: {self._error}") from self._error
        self._start()
        p = _Pending(item)
        self._q.put(p)
        return p.done

    async def save_async(self, item: RolloutWrite) -> None:
        await asyncio.wrap_future(self.save(item))

    def flush(self) -> None:
        """Wait until everything queued so far is written."""
        if self._thread is None:
            return
        self.save(RolloutWrite(line="")).result()

    def close(self) -> None:
        """Write what is queued, then stop the thread (a later `save` starts it again)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._q.put(_STOP)
            thread.join()

    # the writer thread --------------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"rollout-writer-{self.root.name}",
                                                daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            first = self._q.get()
            if first is _STOP:
                return
            group, stop = [first], False
            while len(group) < self.max_group:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                group.append(nxt)
            self._write(group)
            if stop:
                return

    def _write(self, group: list[_Pending]) -> None:
        try:
            for p in group:
                for rel, text in p.item.files:
                    write_new_text(self.root / rel, text)
            lines = [p.item.line for p in group if p.item.line]
            if lines:
                append_lines(self.log, lines, sync=self.durability == "group")
            self.groups += 1
            self.records += len(lines)
        except BaseException as e:  # disk full, permissions: every waiter hears of it
            self._error = e
            for p in group:
                p.done.set_exception(e)
            return
        for p in group:
            p.done.set_result(None)

