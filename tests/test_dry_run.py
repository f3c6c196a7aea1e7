"""`skillopt run --dry-run`: the cost of one rollout for the chosen harness and target (or, for a
local model, its time) and the rollouts the run plans, printed before anything starts; nothing is
written and no key is needed."""

from __future__ import annotations

import json

from skillopt.config import RunConfig
from skillopt.engine.estimate import FIXED_PROMPT_TOKENS, measured_row, plan_rollouts
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import code_tasks

SIZES = ["--train-size", "4", "--val-size", "6", "--test-size", "2", "--batch-size", "2", "--epochs", "1"]


def dry(tmp_path, *args: str):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(12))
    env = {k: v for k, v in cli_env(tmp_path).items() if not k.endswith("_API_KEY")}
    r = run_cli(["run", "--dry-run", "--benchmark", str(data), *SIZES, *args], tmp_path, env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written
    return r.stdout


def test_an_agent_rollout_is_priced_from_its_fixed_prompt(tmp_path):
    out = dry(tmp_path, "--harness", "claude-code", "--target-model", "anthropic:claude-sonnet-4-5")
    assert "one rollout (claude-code, anthropic:claude-sonnet-4-5): ~" in out
    assert f"(fixed prompt {FIXED_PROMPT_TOKENS['claude-code']:,} + skill " in out
    cost = float(out.split("; cost $", 1)[1].split()[0])
    assert 0.01 < cost < 5  # ten calls of ~12k prompt tokens at Sonnet's list price
    # 2 steps; baseline 6 val, 4 train, test 2 x 2; the screen, gate and consolidation at most
    assert "planned rollouts: 2 steps; baseline val 6, train 4, screen <= " in out and "test 4: at most " in out
    assert "target cost of the run: at most $" in out


def test_no_price_is_unknown_and_a_given_price_is_used(tmp_path):
    spec = "openai-compatible:my-model@http://127.0.0.1:9/v1"
    out = dry(tmp_path, "--harness", "codex", "--target-model", "vllm:my-model@http://127.0.0.1:9/v1")
    assert "cost unknown (no price for this model: give one in models.prices)" in out
    assert "target cost of the run: unknown" in out
    priced = dry(tmp_path, "--harness", "chat", "--target-model", spec,
                 "--set", 'models.prices={"openai-compatible:my-model": [10000, 0]}')
    # the chat harness: one call; at $0.01 a prompt token and nothing for generated ones
    tokens = int(priced.split("): ~", 1)[1].split()[0].replace(",", ""))
    assert "over ~1 model call (fixed prompt 0 + skill " in priced and f"cost ${tokens / 100:.4f}" in priced


def test_a_local_model_is_free_and_timed_where_measured(tmp_path):
    out = dry(tmp_path, "--harness", "mini-swe-agent", "--target-model", "local:no-such-measured-model")
    assert "cost $0.0000" in out and "a local model: no cost; the time of a rollout is not measured" in out
    table = tmp_path / "agents.json"
    table.write_text(json.dumps({"rows": [
        {"harness": "mini-swe-agent", "benchmark": "swe-local", "target": "local:m", "prompt_tokens": 0},
        {"harness": "mini-swe-agent", "benchmark": "code", "target": "local:m", "prompt_tokens": 900, "wall_s": 60},
        {"harness": "mini-swe-agent", "benchmark": "swe-local", "target": "local:m", "prompt_tokens": 2500,
         "wall_s": 300}]}))
    assert measured_row("mini-swe-agent", "local:m", "swe-local", table)["wall_s"] == 300  # this benchmark first
    assert measured_row("mini-swe-agent", "local:m", "other", table)["prompt_tokens"] == 900  # rows without tokens skipped
    assert measured_row("codex", "local:m", "swe-local", table) is None


def test_the_plan_counts_agent_candidates_only_for_agents():
    cfg = RunConfig(benchmark="x", train={"epochs": 2, "batch_size": 4, "consolidate": False})
    sizes = {"train": 8, "val": 10, "test": 5}
    chat, agent = plan_rollouts(cfg, sizes, agent=False), plan_rollouts(cfg, sizes, agent=True)
    assert (chat.steps, chat.baseline, chat.train, chat.gate, chat.consolidation, chat.test) == (4, 10, 16, 40, 0, 10)
    assert agent.screen > chat.screen  # trajectory reflections, the procedure (the demonstration replaces the chat one)
    # functions to write: the teacher's example run is planned beside the condensed trajectory, one more a step
    code = plan_rollouts(cfg, sizes, agent=True, code=True)
    assert code.screen - agent.screen == chat.steps * min(4, 8, 6)
    assert plan_rollouts(cfg, sizes, agent=False, code=True).screen == chat.screen
