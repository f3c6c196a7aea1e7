"""The executor seam without a cluster: what a rollout asks of a Ray node, how many run at once, the
model endpoints that cannot work across nodes (refused before any rollout, in one line), and the
runner's in-flight bound that follows the executor's slots. The cluster itself: test_ray_executor."""

from __future__ import annotations

import asyncio

import pytest

from skillopt.config import ExecutorConfig
from skillopt.engine.ray_executor import check_reachable, node_slots, rollout_resources
from skillopt.engine.rollouts import Slots
from skillopt.errors import BadInput
from skillopt.models.spec import parse_model_spec
from skillopt.models.types import ProviderEnv
from tests.helpers import cli_env, run_cli, write_jsonl

NODES = {"10.0.0.5", "10.0.0.6"}


def test_a_rollout_asks_for_its_resources_and_container_benchmarks_a_docker_slot():
    ex = ExecutorConfig(kind="ray", num_cpus=2, memory_mb=512, resources={"gpu_small": 0.5})
    assert rollout_resources(ex, docker=False) == {"CPU": 2.0, "gpu_small": 0.5, "memory": 512 * 2**20}
    assert rollout_resources(ex, docker=True)["docker"] == 1.0
    assert rollout_resources(ExecutorConfig(resources={"docker": 4}), docker=True)["docker"] == 4.0
    need = rollout_resources(ExecutorConfig(num_cpus=1), docker=True)
    assert node_slots({"CPU": 16.0, "docker": 4.0}, need) == 4  # the scarcer resource bounds a node
    assert node_slots({"CPU": 16.0}, need) == 0  # no Docker there: no rollout of a container benchmark
    assert node_slots({"CPU": 0.9999999}, {"CPU": 0.3333333}) == 3


def test_endpoints_the_nodes_cannot_reach_are_refused_in_one_line():
    env = ProviderEnv()
    # the embedded model: each node serves its own (ray_worker.NodeModel), nothing crosses nodes
    check_reachable(parse_model_spec("local:qwen2.5-coder-0.5b"), env, NODES, "10.0.0.4", False, False)
    loopback = parse_model_spec("vllm:m@http://127.0.0.1:8000/v1")
    with pytest.raises(BadInput, match="loopback.*10.0.0.5, 10.0.0.6"):
        check_reachable(loopback, env, NODES, "10.0.0.4", False, False)
    check_reachable(loopback, env, {"127.0.0.1"}, "127.0.0.1", False, False)  # one machine: it answers
    check_reachable(parse_model_spec("vllm:m@http://10.0.0.9:8000/v1"), env, NODES, "10.0.0.4", False, False)
    with pytest.raises(BadInput, match="http://localhost:9"):  # a base URL from the environment counts too
        check_reachable(parse_model_spec("openai:gpt-5-mini"), ProviderEnv(openai_base_url="http://localhost:9"),
                        NODES, "10.0.0.4", False, False)
    capture = parse_model_spec("vllm:m@http://10.0.0.9:8000/v1")
    check_reachable(capture, env, NODES, "10.0.0.4", True, False)  # the proxy binds the driver node's address
    with pytest.raises(BadInput, match="ray:// client"):
        check_reachable(capture, env, NODES, "10.0.0.4", True, True)


def test_in_flight_rollouts_follow_the_executors_slots():
    async def go() -> list[int]:
        slots, running, peaks = Slots(ceiling=4, available=2), 0, []

        async def one(i: int) -> None:
            nonlocal running
            async with slots:
                running += 1
                peaks.append(running)
                await asyncio.sleep(0.01)
                if i == 3:
                    slots.resize(8)  # a node joined: up to the ceiling (--concurrency)
                running -= 1

        await asyncio.gather(*[one(i) for i in range(12)])
        return peaks

    peaks = asyncio.run(go())
    assert max(peaks[:4]) <= 2 and max(peaks) == 4


def test_no_cluster_at_the_address_stops_before_the_run_exists(tmp_path):
    pytest.importorskip("ray", reason="the 'ray' extra is not installed")
    data = write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}
                                                for i in range(6)])
    r = run_cli(["run", "--benchmark", str(data), "--harness", "chat", "--target_model",
                 "openai-compatible:x@http://127.0.0.1:9/v1", "--optimizer_model", "openai-compatible:x@http://127.0.0.1:9/v1",
                 "--train-size", "2", "--val-size", "2", "--executor", "ray", "--ray-address", "127.0.0.1:9",
                 "--run-id", "r"], cwd=tmp_path, env=cli_env(tmp_path))
    assert r.returncode == 2, r.stderr + r.stdout
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "no Ray cluster answers at 127.0.0.1:9" in lines[0], lines
    assert not (tmp_path / "runs" / "r").exists()
