"""One definition of the settings that matter: it makes the rollout cache key, the resume fingerprint
and compare's reuse, so a setting that changes scores (a test timeout) never reuses old rollouts, and
one that does not (concurrency, epochs) always does."""

from __future__ import annotations

import re

from skillopt.benchmarks import get_benchmark
from skillopt.benchmarks.code import reference_code
from skillopt.config import resolve_config
from skillopt.engine.settings import settings_that_matter
from skillopt.harness.registry import HarnessContext, make_harness
from skillopt.models import Models
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import REPO, cli_env, run_cli

SAMPLE = str(REPO / "benchmarks" / "sample_qa.jsonl")


def _settings(**layer):
    cfg = resolve_config({"benchmark": SAMPLE, "target_model": "openai-compatible:m@http://127.0.0.1:9/v1", **layer})
    harness = make_harness("chat", HarnessContext(models=Models()))
    return cfg, settings_that_matter(cfg, get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options), harness)


def test_the_key_and_the_fingerprint_follow_the_settings_that_matter_only():
    cfg, base = _settings()
    task = get_benchmark(SAMPLE).tasks("all")[0]
    key = base.rollout_key("sha", task, 0)
    same = [_settings(train={"epochs": 9, "concurrency": 1}), _settings(harness_options={"max_processes": 1}),
            _settings(budget={"max_rollouts": 3}), _settings(sandbox=False)]
    for c, s in same:
        assert s.rollout_key("sha", task, 0) == key and s.fingerprint(c.splits) == base.fingerprint(cfg.splits)
    different = [_settings(target_model="openai:gpt-5"), _settings(limits={"timeout_s": 5}),
                 _settings(limits={"max_tokens": 7}), _settings(harness_options={"max_turns": 3}),
                 _settings(benchmark_options={"max_answer_tokens": 99}), _settings(harness="claude-code"),
                 _settings(gate={"deterministic": "off"}), _settings(gate={"seed": 7})]
    for c, s in different:
        assert s.rollout_key("sha", task, 0) != key and s.fingerprint(c.splits) != base.fingerprint(cfg.splits)
    assert base.rollout_key("sha", task, 1) != key and base.rollout_key("other", task, 0) != key
    c, s = _settings(splits={"train": 3})  # the run's trajectory changes, not a rollout's result
    assert s.rollout_key("sha", task, 0) == key and s.fingerprint(c.splits) != base.fingerprint(cfg.splits)
    assert base.model_copy(update={"scorer_version": "2"}).rollout_key("sha", task, 0) != key


def test_a_changed_benchmark_option_does_not_hit_the_cache(tmp_path):
    """mbpp's test timeout changes scores: an eval with another timeout pays again, the same one does not."""
    bench = get_benchmark("mbpp")
    references = {t.prompt: reference_code(t) for t in bench.tasks("all")}

    def target(req: FakeRequest) -> FakeReply:
        code = next((ref for prompt, ref in references.items() if prompt in req.last_user_text), "pass")
        return FakeReply(text=f"```python\n{code}\n```")

    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: coder\ndescription: Write Python functions.\n---\n# Coder\nWrite the function.\n")
    env = cli_env(tmp_path)
    with FakeModelServer(target) as srv:
        def evaluate(ref: str, timeout: str, *extra: str):
            r = run_cli(["eval", "--skill", ref, "--benchmark", "mbpp", "--split", "test", "--set", "splits.test=3",
                         "--target_model", f"openai-compatible:fake@{srv.openai_url}",
                         "--set", f"benchmark_options.timeout_s={timeout}", *extra], tmp_path, env)
            assert r.returncode == 0, r.stderr[-2000:]
            m = re.search(r"hard ([\d.]+) \(n=(\d+)[^)]*\).*\((\d+) cached", r.stdout)
            assert m, r.stdout
            return float(m.group(1)), int(m.group(2)), int(m.group(3))

        assert evaluate(str(skill), "10", "--set", "run_id=first") == (1.0, 3, 0)
        assert len(srv.calls) == 3  # model calls (each eval's preflight is a GET /models, no call)
        assert evaluate("first:v0", "11") == (1.0, 3, 0) and len(srv.calls) == 6  # another timeout: paid again
        assert evaluate("first:v0", "10") == (1.0, 3, 3) and len(srv.calls) == 6  # the same: reused
