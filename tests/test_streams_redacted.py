"""Every stream is masked like the disk: an optimizer error whose body echoes the API key (a 401's
"Incorrect API key provided: ...") reaches neither stderr nor stdout nor any file of the run in the
clear. Real CLI, fake server."""

from __future__ import annotations

import subprocess
import sys

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, write_jsonl

KEY = "sk-probe-0123456789abcdefSECRET"


def script(req: FakeRequest) -> FakeReply:
    if req.model == "opt":
        return FakeReply(status=401, text=f"Incorrect API key provided: {KEY}. You can find your key at ...")
    return FakeReply(text="Answer: 2", usage=(10, 5))


def test_an_optimizer_error_echoing_the_key_is_masked_on_stderr(tmp_path):
    write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(6)])
    with FakeModelServer(script) as srv:
        args = ["run", "--benchmark", "qa.jsonl", "--target-model", f"openai:fake@{srv.openai_url}",
                "--optimizer-model", f"openai:opt@{srv.openai_url}", "--epochs", "1", "--batch-size", "2",
                "--train-size", "2", "--val-size", "2", "--test-size", "2", "--set", "train.consolidate=false",
                "--progress", "plain"]
        r = subprocess.run([sys.executable, "-m", "skillopt", *args], cwd=tmp_path, env=cli_env(tmp_path, OPENAI_API_KEY=KEY),
                           capture_output=True, text=True, timeout=300)
        assert any(c.model == "opt" for c in srv.calls), r.stderr[-2000:]
    assert r.returncode in (0, 1), r.stderr[-2000:]
    assert "reflection failed (recorded)" in r.stderr, r.stderr[-2000:]
    assert "Incorrect API key provided" in r.stderr  # the error is shown ...
    assert KEY not in r.stderr + r.stdout  # ... with the key masked
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
