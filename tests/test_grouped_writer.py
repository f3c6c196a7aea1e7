"""The grouped rollout writer keeps every acknowledged record, with its trace, across kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from skillopt.io.files import read_jsonl
from skillopt.store.writer import GroupedWriter, RolloutWrite
from tests.helpers import REPO

# Saves records from 16 concurrent coroutines (like rollouts in flight); prints each key once its
# save is acknowledged, and never stops on its own.
DRIVER = """
import asyncio, itertools, json, sys
from pathlib import Path
from skillopt.store.writer import GroupedWriter, RolloutWrite

root = Path(sys.argv[1])
writer = GroupedWriter(root, root / "rollouts.jsonl")
counter = itertools.count()

async def lane():
    while True:
        n = next(counter)
        key = f"{sys.argv[2]}-{n:06d}"
        trace = "".join(json.dumps({"i": i, "pad": "x" * 200}) + "\\n" for i in range(n % 7 + 1))
        line = json.dumps({"key": key, "trace_file": f"traces/{key}.jsonl", "lines": n % 7 + 1})
        await writer.save_async(RolloutWrite(line=line, files=((f"traces/{key}.jsonl", trace),)))
        print(key, flush=True)

async def main():
    await asyncio.gather(*[lane() for _ in range(16)])

asyncio.run(main())
"""


def _acked_then_kill(root: Path, tag: str, wanted: int) -> list[str]:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(root), tag], stdout=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    acked = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            acked.append(line.strip())
            if len(acked) >= wanted:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # only the driver we started, by its pid
        proc.wait()
    return acked


def test_every_acknowledged_record_and_its_trace_survive_kill_9(tmp_path):
    rng = random.Random(12)
    root = tmp_path / "run"
    root.mkdir()
    acked: list[str] = []
    for attempt in range(20):  # the same run folder killed 20 times, as a resumed run would be
        acked += _acked_then_kill(root, f"p{attempt:02d}", rng.randint(1, 120))
        rows = list(read_jsonl(root / "rollouts.jsonl"))
        keys = [r["key"] for r in rows]
        assert len(keys) == len(set(keys))
        assert set(acked) <= set(keys), f"attempt {attempt}: lost {sorted(set(acked) - set(keys))[:5]}"
        for r in rows:  # every record's trace is whole
            lines = (root / r["trace_file"]).read_text().splitlines()
            assert len(lines) == r["lines"] and all(json.loads(x)["i"] == i for i, x in enumerate(lines))
    raw = (root / "rollouts.jsonl").read_text()
    assert raw.endswith("\n") and len(raw.splitlines()) == len(rows)  # no torn line, ever


def test_groups_share_writes_and_flush_reads_own_writes(tmp_path):
    writer = GroupedWriter(tmp_path, tmp_path / "rollouts.jsonl", durability="none")
    futures = [writer.save(RolloutWrite(line=json.dumps({"key": str(i)}), files=((f"t/{i}.txt", str(i)),)))
               for i in range(500)]
    writer.flush()
    assert all(f.done() for f in futures)
    assert [r["key"] for r in read_jsonl(tmp_path / "rollouts.jsonl")] == [str(i) for i in range(500)]
    assert writer.records == 500
    assert (tmp_path / "t" / "499.txt").read_text() == "499"
    writer.close()
    writer.save(RolloutWrite(line=json.dumps({"key": "after"}))).result()  # restarts after close
    assert list(read_jsonl(tmp_path / "rollouts.jsonl"))[-1] == {"key": "after"}
    writer.close()
