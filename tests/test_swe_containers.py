"""SWE-bench images built here and graded by the swebench harness rules, with a real Docker engine.

For three shipped swe-local tasks (one per package), in their locally built images: the gold patch
resolves, an empty patch does not (and the task's tests really fail at the base commit), and a patch
that fixes the bug but breaks a PASS_TO_PASS test is not resolved. The images have the official
layout and are cached by content; `build-images` writes rows the `swebench` benchmark reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from skillopt.benchmarks import get_benchmark
from skillopt.benchmarks.base import SplitSizes
from skillopt.benchmarks.swe_grading import instance_of, load_instances
from skillopt.git import git
from skillopt.benchmarks.swe_local import SHIPPED_TASKS, materialize
from tests.helpers import cli_env, run_cli
from tests.swe_docker import DATASET, IDS, containers, gold, images, needs_docker, owned_by

pytest.importorskip("swebench", reason="the swe extra (swebench) is not installed: pip install 'skillopt[swe]'")
pytestmark = [needs_docker, pytest.mark.slow]

# Per task: a change on top of the gold patch that breaks one PASS_TO_PASS test (file, old, new, test).
BREAKS = {
    "toolz-1.2.0-001": ("toolz/functoolz.py", "    return compose(not_, func)\n", "    return func\n",
                        "toolz/tests/test_functoolz.py::test_complement"),
    "cachetools-8.0.1-002": ("src/cachetools/keys.py", "    else:\n        return args\n\n\ndef methodkey",
                             "    else:\n        return tuple(sorted(args))\n\n\ndef methodkey",
                             "tests/test_keys.py::CacheKeysTest::test_hashkey"),
    "inflection-0.5.1-001": ("inflection/__init__.py", "    return word.replace('_', '-')\n", "    return word\n",
                             "test_inflection.py::test_dasherize[street_address-street-address]"),
}


@pytest.fixture(scope="module")
def bench():
    images(IDS)
    b = get_benchmark("swebench", SplitSizes(), dataset=DATASET, instance_ids=",".join(IDS))
    b.preflight()
    yield b
    b.close()


def breaking_patch(instance_id: str, tmp: Path) -> str:
    """The gold patch plus a change that breaks one PASS_TO_PASS test, as a `git diff`."""
    inst = next(i for i in load_instances(SHIPPED_TASKS) if i.instance_id == instance_id)
    repo = tmp / f"src-{instance_id}"
    repo.mkdir()
    materialize(inst, str(SHIPPED_TASKS.parent / inst.source), repo)
    git(repo, "apply", "-", input=inst.patch)
    rel, old, new, _ = BREAKS[instance_id]
    text = (repo / rel).read_text()
    assert text.count(old) == 1, f"{rel} changed: update BREAKS"
    (repo / rel).write_text(text.replace(old, new))
    return git(repo, "diff").stdout


@pytest.mark.parametrize("instance_id", IDS)
def test_gold_resolves_empty_does_not_and_a_broken_pass_to_pass_is_not_resolved(bench, instance_id, tmp_path):
    task = next(t for t in bench.tasks("all") if t.id == instance_id)
    inst = instance_of(task)

    ok = bench.grade(task, gold(instance_id), log_dir=tmp_path / "gold")
    assert ok.resolved and ok.score.hard == 1, ok.score.feedback
    assert sorted(ok.f2p_passed) == sorted(inst.FAIL_TO_PASS) and not ok.p2p_failed
    log = (tmp_path / "gold" / "test_output.txt").read_text()
    assert ">>>>> Applied Patch" in log and ">>>>> Start Test Output" in log and ">>>>> Test Exit Code: 0" in log
    assert json.loads((tmp_path / "gold" / "report.json").read_text())["resolved"] is True

    empty = bench.grade(task, "")
    assert empty.empty_patch and not empty.resolved and empty.score.hard == 0
    base = bench.grade(task, "", run_empty=True)  # the hidden tests run on the base commit: they fail
    assert not base.resolved and sorted(base.f2p_failed) == sorted(inst.FAIL_TO_PASS) and not base.p2p_failed

    broken = bench.grade(task, breaking_patch(instance_id, tmp_path), log_dir=tmp_path / "broken")
    assert broken.applied and not broken.resolved and broken.score.hard == 0
    assert sorted(broken.f2p_passed) == sorted(inst.FAIL_TO_PASS)  # the bug is fixed...
    assert BREAKS[instance_id][3] in broken.p2p_failed  # ...but a test that passed no longer does
    assert "broken by the patch" in broken.score.feedback

    assert owned_by(os.getpid()) == []  # every grading container is gone


def test_images_have_the_official_layout_and_are_cached_by_content(bench, tmp_path):
    from skillopt.benchmarks.swe_images import build_images

    instances = [i for i in load_instances(SHIPPED_TASKS) if i.instance_id in IDS]
    again = build_images(instances, SHIPPED_TASKS.parent)
    assert [b.built for b in again] == [False] * len(IDS)  # nothing is rebuilt
    inst = instances[0]
    image = again[0].image
    assert image == f"local/sweb.eval.x86_64.{inst.instance_id}:latest"
    probe = ("cd /testbed && git rev-parse HEAD && git rev-list --all | wc -l && git status --porcelain | wc -l "
             "&& (test -e /eval.sh && echo has-eval || echo no-eval) && python -m pytest --version 2>&1 | head -1")
    out = subprocess.run(["docker", "run", "--rm", image, "bash", "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")
    assert out[:4] == [inst.base_commit, "1", "0", "no-eval"] and out[4].startswith("pytest")

    rows = tmp_path / "rows.jsonl"
    r = run_cli(["benchmarks", "build-images", "--ids", ",".join(IDS), "--out", str(rows)], tmp_path,
                cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{len(IDS)} images (0 built, {len(IDS)} up to date)" in r.stdout
    written = [json.loads(x) for x in rows.read_text().splitlines()]
    assert {w["instance_id"] for w in written} == set(IDS)
    assert all(w["image"].startswith("local/sweb.eval.x86_64.") and w["eval_script"].startswith("#!/bin/bash\n")
               and w["log_parser"] == "parse_log_pytest" for w in written)
    b = get_benchmark("swebench", SplitSizes(), dataset=str(rows), instance_ids=IDS[0])
    b.preflight()  # a rows file with local images: found here, nothing pulled
    assert b.grade(b.tasks("all")[0], gold(IDS[0])).resolved
    b.close()


def test_a_missing_local_image_is_one_line_before_any_rollout(tmp_path):
    rows = tmp_path / "rows.jsonl"
    row = json.loads(SHIPPED_TASKS.read_text().splitlines()[0])
    row.update(image="local/sweb.eval.x86_64.nothing-here:latest", eval_script="#!/bin/bash\n")
    rows.write_text(json.dumps(row) + "\n")
    r = run_cli(["run", "--benchmark", "swebench", "--set", f"benchmark_options.dataset={rows}",
                 "--harness", "claude-code", "--target_model", "anthropic:m@http://127.0.0.1:9",
                 "--optimizer_model", "openai-compatible:o@http://127.0.0.1:9/v1"], tmp_path, cli_env(tmp_path))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "nothing-here" in lines[0] and "build-images" in lines[0] and "Traceback" not in r.stderr


@pytest.mark.skipif(shutil.which("docker") is None, reason="the docker command line is not installed")
def test_leftovers_of_a_dead_process_are_removed_and_a_live_ones_kept():
    """A container whose owner died (kill -9) is removed at the next start; a live owner's is kept."""
    import socket

    import docker

    from skillopt.benchmarks.docker_engine import owner, remove_orphans

    client = docker.from_env()
    dead = subprocess.Popen(["true"])
    dead.wait()
    owners = {"skillopt-test-ghost": f"{socket.gethostname()}:{dead.pid}:1", "skillopt-test-alive": owner()}
    try:
        for name, who in owners.items():
            client.containers.run(images(IDS)[0], "sleep 120", name=name, detach=True, init=True,
                                  labels={"skillopt": "1", "skillopt.owner": who, "skillopt.run": "leftovers-test"})
        assert remove_orphans(client, run="leftovers-test") == ["skillopt-test-ghost"]
        assert containers("skillopt.run=leftovers-test") == ["skillopt-test-alive"]
    finally:
        subprocess.run(["docker", "rm", "-f", *owners], capture_output=True)
