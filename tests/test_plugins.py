"""Plugins: the example plugin package (examples/plugin) installed with pip into a folder of its own,
then found through its entry points by the real CLI: its benchmark, its scorer, its harness."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import REPO, cli_env, run_cli, write_jsonl


def install_example_plugin(tmp_path) -> str:
    source = tmp_path / "plugin-src"
    shutil.copytree(REPO / "examples" / "plugin", source)
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "--target", str(target), str(source)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return str(target)


def capital_agent(req: FakeRequest) -> FakeReply:
    if "You improve a skill" in req.last_user_text:
        edit = {"op": "add", "anchor": "", "text": "Name the city only.", "rationale": "format", "evidence": []}
        return FakeReply(text=json.dumps({"analysis": "format", "edits": [edit]}))
    user = req.last_user_text
    assert "Instructions:" in user  # the plugin harness put the skill into the user message
    return FakeReply(text="Answer: paris" if "France" in user else "Answer: Atlantis")


def test_the_example_plugin_is_discovered_and_used(tmp_path):
    site = install_example_plugin(tmp_path)
    env = {**cli_env(tmp_path), "PYTHONPATH": os.pathsep.join([site, str(REPO)])}
    listed = run_cli(["benchmarks", "list"], tmp_path, env)
    assert listed.returncode == 0 and "capitals" in listed.stdout and "plugin" in listed.stdout, listed.stdout
    with FakeModelServer(capital_agent) as srv:
        url = srv.openai_url
        r = run_cli(["eval", "--skill", str(REPO / "skills" / "default" / "SKILL.md"), "--benchmark", "Capitals",
                     "--harness", "user-prompt", "--target-model", f"openai-compatible:t@{url}", "--split", "all",
                     "--set", "run_id=caps"], tmp_path, env)
        assert r.returncode == 0, r.stderr[-2000:]
        # the plugin's scorer: case-insensitive by default, strict on request (its own cache version)
        assert "hard 0.083" in r.stdout and "(n=12" in r.stdout, r.stdout  # 1 of 12: paris ~ Paris
        strict = run_cli(["eval", "--skill", str(REPO / "skills" / "default" / "SKILL.md"), "--benchmark", "capitals",
                          "--harness", "user-prompt", "--target-model", f"openai-compatible:t@{url}", "--split", "all",
                          "--set", "benchmark_options.strict=true"], tmp_path, env)
        assert strict.returncode == 0 and "hard 0.000" in strict.stdout, strict.stdout
        # the plugin scorer on a .jsonl benchmark
        data = write_jsonl(tmp_path / "caps.jsonl", [{"id": "fr", "question": "Capital of France?", "answer": "Paris"},
                                                     {"id": "pe", "question": "Capital of Peru?", "answer": "Lima"}])
        r = run_cli(["eval", "--skill", str(REPO / "skills" / "default" / "SKILL.md"), "--benchmark", str(data),
                     "--harness", "user-prompt", "--target-model", f"openai-compatible:t@{url}", "--split", "all",
                     "--set", "benchmark_options.scorer=city", "--set", "splits.train=0", "--set", "splits.val=0"],
                    tmp_path, env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "hard 0.500" in r.stdout  # "paris" for France counts (case-insensitive), "Atlantis" for Peru does not
    rows = [json.loads(x) for x in next((tmp_path / "runs").glob("eval-*caps*/rollouts.jsonl")).read_text().splitlines()]
    assert {x["feedback"] for x in rows} <= {"correct", "expected Lima, got Atlantis", "expected Paris, got paris"}
