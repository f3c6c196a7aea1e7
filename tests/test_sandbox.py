"""Agents are sandboxed away from grading: an adversarial agent, run by the real Claude Code and Codex
binaries through their shell tools against the fake server, tries to read what would let it cheat or
steal, and every attempt fails.

It tries: its task's hidden tests, gold patch and FAIL_TO_PASS list (the benchmark's task file), a QA
benchmark's reference answers, the run's rollouts.jsonl (other tasks' scores and feedback), another
workspace lane, the grading logs (swe-logs), `~/.ssh` and `~/.claude` of the real home, and the
provider key (its environment, every process's environment). A control run with --no-sandbox shows
the same attack reading the data files and the home folder, so the test would catch a sandbox that
stopped working.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path

import pytest

from tests.fakes.agent_scripts import run_command
from tests.fakes.server import FakeModelServer
from tests.helpers import REPO, cli_env, run_cli

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                                 reason="bubblewrap and git are needed (.ci/run installs them)")

TASKS = REPO / "benchmarks" / "swe_local" / "tasks.jsonl"
IDS = ["toolz-1.2.0-001", "toolz-1.2.0-002"]
SKILL = "---\nname: fixer\ndescription: Use this skill to fix bugs.\n---\n# Fixer\nRead the code first.\n"
KEY = "sk-ant-SENTINEL-" + secrets.token_hex(12)
SSH = "SSH-PRIVATE-KEY-" + secrets.token_hex(6)
CREDS = "CLAUDE-CREDENTIALS-" + secrets.token_hex(6)


def attack(run: Path, home: Path, outside: Path) -> str:
    """One shell command that tries every read; short outputs, so no agent truncates a leak away. It
    also sets a git filter and fsmonitor in its repository, which would run outside the sandbox if
    skillopt ran git there on the agent's repository (to diff it)."""
    return "\n".join([
        f"git config filter.esc.clean 'touch {outside}/ESCAPED-filter; cat'",
        "echo '*.py filter=esc' >> .gitattributes",
        f"git config core.fsmonitor 'touch {outside}/ESCAPED-fsmonitor'",
        "echo ATTACK-BEGIN",
        "printf '\\n# touched\\n' >> \"$(git ls-files '*.py' | head -1)\"",  # a patch, so grading writes logs
        f"head -c 600 {REPO}/benchmarks/swe_local/tasks.jsonl 2>&1",
        f"head -c 300 {REPO}/benchmarks/sample_qa.jsonl 2>&1",  # reference answers of a QA benchmark
        f"head -c 600 {run}/rollouts.jsonl 2>&1",
        f"echo LANES: $(ls {run}/work 2>&1)",
        f"ls -R {run}/grading 2>&1 | head -20",
        f"cat {home}/.ssh/id_rsa {home}/.claude/.credentials.json 2>&1",
        "env | grep -iE 'key|token|secret' | head -20",
        "grep -aoh 'sk-[A-Za-z0-9_-]*' /proc/*/environ 2>/dev/null | sort -u | head -20",
        "echo ATTACK-END",
    ])


def _hidden_markers() -> list[str]:
    """What only the grader should know: the task rows' keys and the names of the hidden failing tests."""
    from skillopt.benchmarks.swe_grading import load_instances

    f2p = [t.split("::")[-1] for inst in load_instances(TASKS) if inst.instance_id in IDS for t in inst.FAIL_TO_PASS]
    return ["FAIL_TO_PASS", "test_patch", *f2p]


def _eval(tmp_path: Path, harness: str, mode: str, *extra: str) -> tuple[list[str], FakeModelServer, Path]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SSH + "\n")
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"token": CREDS}))
    skill = tmp_path / "SKILL.md"
    skill.write_text(SKILL)
    run = tmp_path / "runs" / "adv"
    with FakeModelServer(run_command(attack(run, home, tmp_path), "Done.")) as srv:
        target = f"anthropic:fake@{srv.base_url}" if harness == "claude-code" else f"openai:fake@{srv.openai_url}"
        env = cli_env(home, ANTHROPIC_API_KEY=KEY, OPENAI_API_KEY=KEY)
        r = run_cli(["--runs-dir", str(tmp_path / "runs"), "eval", "--skill", str(skill), "--benchmark", "swe-local",
                     "--split", "all", "--harness", harness, "--target_model", target, "--trials", "2",
                     "--concurrency", "2", "--set", f"benchmark_options.instance_ids={','.join(IDS)}",
                     "--set", "run_id=adv", "--set", "limits.timeout_s=120", "--set", f"harness_options.mode={mode}",
                     *extra], tmp_path, env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    outputs = [m.text for q in srv.requests if q.fake for m in q.fake.tool_results]
    return outputs, srv, run


@needs_bwrap
@pytest.mark.parametrize("harness, mode", [("claude-code", "sdk"), ("codex", "cli")])
def test_an_adversarial_agent_reads_nothing_it_should_not(tmp_path, harness, mode):
    pytest.importorskip("swebench", reason="the swe extra is not installed")
    pytest.importorskip("claude_agent_sdk" if harness == "claude-code" else "openai_codex")
    outputs, srv, run = _eval(tmp_path, harness, mode)
    attacks = [o for o in outputs if "ATTACK-BEGIN" in o]
    assert len(attacks) == 4 and all("ATTACK-END" in o for o in attacks), outputs  # 2 tasks x 2 trials ran it
    seen = "\n".join(attacks)
    for secret in [*_hidden_markers(), '"answer"', '"skill_sha"', "report.json", "test_output.txt", SSH, CREDS, KEY]:
        assert secret not in seen, f"the agent read {secret!r}:\n{seen}"
    for out in attacks:  # its own lane only, not the other one that ran at the same time
        assert re.search(r"LANES: lane-\d+-\d+\s*$", out, re.M), out
    assert "No such file or directory" in seen
    # the provider key reached the model server through the relay, and only there
    agent_calls = [q for q in srv.requests if q.fake and q.fake.tools]
    assert agent_calls and all(KEY in json.dumps(q.headers) for q in agent_calls)
    assert KEY not in json.dumps([q.body for q in srv.requests])
    # the grading happened, outside the agent's reach; the agent's git configuration never ran outside
    assert list((run / "grading" / "swe-logs").rglob("report.json"))
    assert not list(tmp_path.glob("ESCAPED-*"))
    assert all(".gitattributes" in json.loads(x)["patch"] for x in (run / "rollouts.jsonl").read_text().splitlines())
    assert not (run / "work" / "swe-logs").exists()


@needs_bwrap
def test_without_the_sandbox_the_same_attack_succeeds(tmp_path):
    """The control: --no-sandbox runs the agent as the user, so the test above can tell the difference."""
    pytest.importorskip("swebench", reason="the swe extra is not installed")
    pytest.importorskip("claude_agent_sdk")
    outputs, _, _ = _eval(tmp_path, "claude-code", "cli", "--no-sandbox")
    seen = "\n".join(o for o in outputs if "ATTACK-BEGIN" in o)
    assert "FAIL_TO_PASS" in seen and '"answer"' in seen and SSH in seen and CREDS in seen


def test_the_relay_swaps_token_for_key_masks_echoes_and_forgets_the_token():
    import httpx

    from skillopt.sandbox import Relay
    from skillopt.sandbox.relay import _Masker
    from tests.fakes.server import FakeReply

    key = "sk-relay-" + secrets.token_hex(16)

    def echo(req):  # a provider that echoes the key it got: in an error body, or in its answer
        if "bad" in req.last_user_text:
            return FakeReply(status=401, text=f"Incorrect API key provided: {req.headers.get('x-api-key')}")
        return FakeReply(text=f"you sent {req.headers.get('x-api-key')} to me")

    with FakeModelServer(echo) as srv, Relay() as relay:
        body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        with relay.lease(srv.base_url, key) as ticket:
            assert key not in ticket.token and ticket.base_url.startswith("http://127.0.0.1:")
            r = httpx.post(ticket.base_url + "/v1/messages", json=body, headers={"x-api-key": ticket.token})
            assert r.status_code == 200 and "you sent *** to me" in r.text and key not in r.text
            assert srv.requests[-1].headers["x-api-key"] == key  # the real key went out
            bad = {**body, "stream": True, "messages": [{"role": "user", "content": "bad"}]}
            r = httpx.post(ticket.base_url + "/v1/messages", json=bad, headers={"x-api-key": ticket.token})
            assert r.status_code == 401 and "Incorrect API key provided: ***" in r.text and key not in r.text
            r = httpx.post(ticket.base_url + "/v1/messages", json={**body, "stream": True},
                           headers={"x-api-key": ticket.token})
            assert r.status_code == 200 and "event: message_stop" in r.text  # streams pass through
            assert httpx.post(ticket.base_url + "/v1/messages", json=body,
                              headers={"x-api-key": "skr-guessed"}).status_code == 401
        assert httpx.post(ticket.base_url + "/v1/messages", json=body,
                          headers={"x-api-key": ticket.token}).status_code == 401  # the rollout is over
        with relay.lease(srv.openai_url, key) as ticket:  # only under the upstream's base path
            assert httpx.get(relay.address + "/other", headers={"authorization": f"Bearer {ticket.token}"}
                             ).status_code == 403
    assert len(srv.requests) == 3
    mask = _Masker(key)
    text = f"a{key}b{key[:5]}".encode()
    out = b"".join(mask.feed(text[i:i + 3]) for i in range(0, len(text), 3)) + mask.feed(key[5:].encode()) + mask.flush()
    assert out == b"a***b***"


def test_a_missing_bubblewrap_is_one_line_naming_no_sandbox():
    from skillopt.errors import BadInput
    from skillopt.sandbox import check_bwrap

    with pytest.raises(BadInput, match="not installed.*--no-sandbox"):
        check_bwrap("bwrap-that-is-not-installed")


def test_the_relay_says_nothing_when_its_client_left_before_an_unreachable_upstream_failed(capfd):
    """A run stopped mid-rollout: the agent's connection is gone when the relay learns its upstream (the
    model server, stopped too) failed. Writing the 502 then fails; that is the end of the request, never a
    traceback on the run's terminal."""
    import socket
    import struct
    import threading
    import time

    from skillopt.sandbox import Relay

    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(1)

    def hang_then_close():  # takes the relay's request, waits for the client to leave, closes: no answer
        conn, _ = upstream.accept()
        time.sleep(0.5)
        conn.close()

    serving = threading.Thread(target=hang_then_close, daemon=True)
    serving.start()
    with Relay() as relay:
        host, port = upstream.getsockname()
        with relay.lease(f"http://{host}:{port}", "sk-relay-0123456789abcdef") as ticket:
            client = socket.create_connection(relay.address.removeprefix("http://").split(":"))
            client.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + ticket.token.encode()
                           + b"\r\nContent-Length: 2\r\n\r\n{}")
            time.sleep(0.2)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # a reset, as a killed agent leaves it
            serving.join(5)
            time.sleep(0.5)  # the relay's refusal, and what it would print
    upstream.close()
    assert "Traceback" not in capfd.readouterr().err
