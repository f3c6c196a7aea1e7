"""The run prints its own ETA from the throughput it measures (engine/eta.py): a first estimate as soon
as the first phase is measured (well within a minute), then one after every step. Real CLI, fake server."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.fakes.server import FakeModelServer, FakeReply
from tests.helpers import cli_env, write_jsonl

ETA = re.compile(r"^\[(\d\d):(\d\d)\] eta: about \d\d:\d\d left( after step \d+)? \(\d\d:\d\d so far; \d+ rollouts/min "
                 r"measured, (\d+) of about (\d+) rollouts done\)$")


def test_a_run_prints_its_eta_early_and_after_each_step(tmp_path):
    write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(12)])
    with FakeModelServer(lambda req: FakeReply(text="Answer: 2", usage=(10, 5))) as srv:
        spec = f"openai-compatible:fake@{srv.openai_url}"
        r = subprocess.run(
            [sys.executable, "-m", "skillopt", "run", "--benchmark", "qa.jsonl", "--target-model", spec,
             "--optimizer-model", spec, "--epochs", "2", "--batch-size", "2", "--train-size", "2", "--val-size", "6",
             "--test-size", "2", "--set", "train.consolidate=false", "--progress", "plain"],
            cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    etas = [(i, ETA.match(x)) for i, x in enumerate(lines) if "eta: about" in x]
    assert etas and all(m for _, m in etas), r.stderr
    first_step = next(i for i, x in enumerate(lines) if "step 1/2 (epoch 1)" in x)
    (i0, m0), *later = etas
    assert i0 < first_step and m0.group(3) is None  # an estimate before the optimizer's first step ends
    assert int(m0.group(1)) * 60 + int(m0.group(2)) < 60
    assert int(m0.group(4)) == 6 and int(m0.group(5)) > 6  # the baseline done, of a plan that is larger
    assert [m.group(3) for _, m in later] == [" after step 1", " after step 2"]
