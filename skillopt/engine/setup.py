"""Building a run's parts from its resolved configuration, and every check that must pass before
anything is written: model specs and keys, prices for a cost budget, the benchmark and its splits,
task paths, the seed skill, the sandbox, the harness and its options.

`train` and `evaluate_skill` both build through here, so a bad input fails the same way, before
the run folder exists.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks import get_benchmark
from skillopt.benchmarks.base import (
    RUN_SPLITS, Benchmark, Closable, DrivesContainerFromHost, LabelsByRun, NeedsPreflight, RunsContainers, Split,
    Task,
)
from skillopt.benchmarks.custom import UsesModels
from skillopt.config import RunConfig
from skillopt.engine.events import Emitter, Note
from skillopt.engine.executor import Executor, LocalExecutor
from skillopt.engine.settings import Settings, deterministic_mode, effective_limits, settings_that_matter
from skillopt.engine.usage import check_prices
from skillopt.errors import BadInput
from skillopt.harness.base import Harness, Limits
from skillopt.harness.registry import HarnessContext, check_compatible, harness_info, make_harness
from skillopt.harness.workspace import check_task_paths, check_skill_name
from skillopt.models import Budget, Meter, Models, ProviderEnv, ResponseCache, RetryPolicy, check_credentials
from skillopt.models.spec import ModelSpec, parse_model_spec
from skillopt.sandbox import NoSandbox, Relay, RunsUntrustedCode, Sandbox, make_sandbox
from skillopt.skill import Skill
from skillopt.store.layout import RunPaths
from skillopt.store.run_store import RunStore

SKILLS_DIR = Path(__file__).resolve().parents[2] / "skills"


@dataclass(frozen=True)
class Specs:
    target: ModelSpec
    optimizer: ModelSpec | None

    def training_optimizer(self) -> ModelSpec:
        """The optimizer model, which training always has (`resolve_specs(need_optimizer=True)`)."""
        if self.optimizer is None:
            raise ValueError("training needs an optimizer model: resolve the specs with need_optimizer=True")
        return self.optimizer


def resolve_specs(cfg: RunConfig, env: ProviderEnv, need_optimizer: bool = True) -> Specs:
    """Parse and check both specs, the harness/target combination and a cost budget's prices."""
    if not cfg.target_model:
        raise BadInput("no target model: pass --target-model (e.g. openai:gpt-5-mini, or local:qwen2.5-coder-1.5b "
                       "to run offline)")
    target = parse_model_spec(cfg.target_model)
    check_compatible(cfg.harness, target)
    check_credentials(target, env)
    if captures_tokens(cfg, target):
        from skillopt.traces.tokens import check_capture

        check_capture(target)
    optimizer = None
    if need_optimizer:
        if not cfg.optimizer_model:
            raise BadInput("no optimizer model: pass --optimizer_model (e.g. openai:gpt-5)")
        optimizer = parse_model_spec(cfg.optimizer_model)
        check_credentials(optimizer, env)
    spending = {"target": target, **({"optimizer": optimizer} if optimizer else {})}
    check_prices(cfg.budget, spending, cfg.models.prices)
    return Specs(target, optimizer)


def preflight_models(cfg: RunConfig, specs: Specs, benchmark: Benchmark, env: ProviderEnv) -> None:
    """Every model endpoint the run calls (target, optimizer, a judge) answers one cheap request, before
    the run folder exists (`models.preflight`)."""
    from skillopt.models.preflight import check_endpoints

    roles = {"target": specs.target, **({"optimizer": specs.optimizer} if specs.optimizer else {}),
             **scorer_specs(cfg, benchmark, env)}
    check_endpoints(roles, env, timeout_s=min(cfg.models.timeout_s, 10.0))


def size_local_models(specs: Specs, concurrency: int) -> None:
    """A local model serves the run's rollouts in flight in parallel slots (llama.cpp decodes them in
    one batch per step), plus one for the optimizer when it is the same model; sized before any call."""
    wanted: dict[str, int] = {}
    if specs.target.provider == "local":
        wanted[specs.target.model] = concurrency
    if specs.optimizer is not None and specs.optimizer.provider == "local":
        wanted[specs.optimizer.model] = wanted.get(specs.optimizer.model, 0) + 1
    if wanted:
        from skillopt.models.local import reserve_slots  # lazy: only for local specs

        for name, slots in wanted.items():
            reserve_slots(name, slots)


@contextmanager
def open_benchmark(cfg: RunConfig, given: Benchmark | None = None) -> Iterator[Benchmark]:
    """The benchmark, checked before any rollout (e.g. a Docker engine for swebench) and released
    after the last (containers, clients); benchmarks without `preflight` / `close` need neither.
    `given`: a benchmark built in Python (`skillopt.train(tasks=...)`) instead of one by name."""
    benchmark = given if given is not None else get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
    if isinstance(benchmark, NeedsPreflight):
        benchmark.preflight()
    try:
        yield benchmark
    finally:
        if isinstance(benchmark, Closable):
            benchmark.close()


def seed_skill(cfg: RunConfig, given: Skill | None = None) -> Skill:
    """The seed skill (`given`, else `cfg.seed_skill`, else the benchmark's own), checked: a name that
    is a safe folder name, and within the token cap."""
    skill = given or _find_seed(cfg)
    check_skill_name(skill)
    if skill.tokens() > cfg.train.skill_token_cap:
        raise BadInput(f"the seed skill {skill.name!r} has about {skill.tokens()} tokens, over train.skill_token_cap "
                       f"({cfg.train.skill_token_cap}): every edit would be rejected; shorten it or raise the cap "
                       f"(--set train.skill_token_cap=N)")
    return skill


def _find_seed(cfg: RunConfig) -> Skill:
    if cfg.seed_skill:
        return Skill.load(cfg.seed_skill)
    name = Path(cfg.benchmark).stem if cfg.benchmark.endswith(".jsonl") else cfg.benchmark
    for candidate in (SKILLS_DIR / name / "SKILL.md", SKILLS_DIR / "default" / "SKILL.md"):
        if candidate.exists():
            return Skill.load(candidate)
    raise BadInput(f"no seed skill for {cfg.benchmark!r}: pass --skill PATH")


def check_splits(cfg: RunConfig, benchmark: Benchmark, needed: tuple[Split, ...], sizes_by_flag: bool = True) -> None:
    """Each split in `needed` has tasks (an empty val split would make every candidate a tie). The
    hint names the setting that fixes it: the split's own size when it is 0, else the earlier
    split that took every task (train, then val, then test). `sizes_by_flag`: the command has
    `--train-size` / `--val-size` / `--test-size` (run); else `--set splits.NAME=N` (eval)."""
    def option(split: str, n: int | str) -> str:
        return f"--{split}-size {n}" if sizes_by_flag else f"--set splits.{split}={n}"

    total = len(list(benchmark.tasks("all")))
    order = list(RUN_SPLITS)
    for split in needed:
        if list(benchmark.tasks(split)):
            continue
        where = f"the {split} split of {cfg.benchmark} is empty"
        if total == 0:
            raise BadInput(f"{where}: the benchmark has no tasks")
        counts = {s: len(list(benchmark.tasks(s))) for s in order[:order.index(split)]} if split in order else {}
        before = [s for s, n in counts.items() if n]
        if getattr(cfg.splits, split, None) == 0 or not before:
            raise BadInput(f"{where} (splits.{split}={getattr(cfg.splits, split, None)}, {total} tasks in all): give "
                           f"it tasks with {option(split, 'N')}")
        lower = max(before, key=lambda s: counts[s])
        took = ", ".join(f"{s} {counts[s]}" for s in before)
        raise BadInput(f"{where}: {' and '.join(before)} took all {total} tasks ({took}); lower "
                       f"{option(lower, max(1, counts[lower] // 2))} (or so) to leave some for {split}")


def record_prompts(store: RunStore, benchmark: Benchmark, splits: tuple[Split, ...]) -> None:
    """What each task of `splits` asks, kept with the run so the report can show it beside its rollouts."""
    def text(t: Task) -> str:
        parts = [f"[context] {t.context}" if t.context else "", t.prompt,
                 "\n".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(t.choices))]
        return "\n".join(p for p in parts if p)

    store.write_task_prompts({t.id: text(t) for split in splits for t in benchmark.tasks(split)})


def make_models(cfg: RunConfig, env: ProviderEnv, meter: Meter, cache_path: Path | None) -> Models:
    return Models(env=env, meter=meter, cache=ResponseCache(cache_path) if cache_path else None,
                  retry=RetryPolicy(attempts=cfg.models.retries + 1, base_delay_s=cfg.models.retry_base_delay_s),
                  timeout_s=cfg.models.timeout_s, prices=cfg.models.prices)


@dataclass(frozen=True)
class Parts:
    """What a run's rollouts need, built and checked before the run folder is made."""

    settings: Settings
    limits: Limits
    deterministic: bool  # temperature 0 and a seed (see engine.settings.deterministic_mode)
    meter: Meter
    models: Models
    harness: Harness
    sandbox: Sandbox
    relay: Relay | None  # agent harnesses: their model key stays here, behind it


def scorer_specs(cfg: RunConfig, benchmark: Benchmark, env: ProviderEnv) -> dict[str, ModelSpec]:
    """The models a benchmark's scorer calls (the model-graded judge), by role, checked: their keys,
    and their prices when a cost budget must be enforced."""
    if not isinstance(benchmark, UsesModels):
        return {}
    specs = {role: parse_model_spec(s) for role, s in benchmark.model_specs().items()}
    for spec in specs.values():
        check_credentials(spec, env)
    check_prices(cfg.budget, specs, cfg.models.prices)
    return specs


def build_parts(cfg: RunConfig, benchmark: Benchmark, env: ProviderEnv, cache_path: Path | None) -> Parts:
    check_task_paths(benchmark.tasks("all"))
    scorer_specs(cfg, benchmark, env)
    meter = Meter(Budget(**cfg.budget.model_dump()))
    models = make_models(cfg, env, meter, cache_path)
    if isinstance(benchmark, UsesModels):  # a judge's calls are metered and budgeted with the run's
        benchmark.bind_models(models)
    harness, sandbox, relay = harness_parts(cfg, benchmark, models)
    deterministic = deterministic_mode(cfg, harness)
    return Parts(settings_that_matter(cfg, benchmark, harness), effective_limits(cfg, benchmark, deterministic),
                 deterministic, meter, models, harness, sandbox, relay)


def harness_parts(cfg: RunConfig, benchmark: Benchmark, models: Models) -> tuple[Harness, Sandbox, Relay | None]:
    """The harness, the sandbox its agents (and tests of their code) run in, and for agent harnesses
    the relay that keeps their model key (not started). The driver and each Ray worker build theirs here."""
    agent = harness_info(cfg.harness).agent
    needs_sandbox = agent or isinstance(benchmark, RunsUntrustedCode)
    if agent and cfg.sandbox and isinstance(benchmark, DrivesContainerFromHost) and benchmark.host_agent_uses_docker:
        raise BadInput("benchmark_options.agent_in_container=false has the agent drive the task's container through "
                       "the Docker socket, which would hand it the host: the sandbox cannot allow that; keep the "
                       "agent in the container (the default) or pass --no-sandbox to run it knowingly")
    sandbox = make_sandbox(cfg.sandbox) if needs_sandbox else NoSandbox()
    relay = Relay() if agent else None
    harness = make_harness(cfg.harness, HarnessContext(models=models, options=dict(cfg.harness_options),
                                                        sandbox=sandbox, relay=relay))
    return harness, sandbox, relay


@contextmanager
def isolation(parts: Parts, benchmark: Benchmark, store: RunStore) -> Iterator[None]:
    """For the rollouts of a run: the relay up, grading in the sandbox with its logs in `grading/`."""
    if isinstance(benchmark, RunsUntrustedCode):
        benchmark.isolate(parts.sandbox, store.paths.grading)
    if isinstance(benchmark, LabelsByRun):
        benchmark.bind_run(store.run_id)
    with parts.relay if parts.relay is not None else nullcontext():
        yield


@contextmanager
def open_executor(cfg: RunConfig, parts: Parts, benchmark: Benchmark, run_id: str, runs_dir: Path,
                  env: ProviderEnv, target: ModelSpec) -> Iterator[Executor]:
    """Where the run's rollouts run (`executor.kind`): this process, or a Ray cluster, connected and
    checked here (every node, the model endpoint) before the run folder is made."""
    if cfg.executor.kind == "local":
        yield LocalExecutor(parts.harness, benchmark, parts.limits, RunPaths.of(runs_dir, run_id).work,
                            os.getpid(), cfg.train.concurrency)
        return
    from skillopt.engine.ray_executor import RayExecutor

    docker = isinstance(benchmark, RunsContainers) and benchmark.uses_docker
    with RayExecutor(cfg, run_id, env, parts.limits, target, benchmark, docker) as executor:
        yield executor


def captures_tokens(cfg: RunConfig, target: ModelSpec) -> bool:
    """Whether a run records token-level data: always for `vllm:` targets, on `--capture-tokens` for
    targets that can return token ids (`local:`, the embedded llama.cpp server; `openai-compatible:`);
    asked of any other target, a `BadInput`."""
    if cfg.capture_tokens and not target.captures_tokens and target.provider not in ("local", "openai-compatible"):
        raise BadInput(f"--capture-tokens needs a target that returns token ids (vllm:, local: or "
                       f"openai-compatible:), not {target.provider}: drop the flag or change --target-model")
    if cfg.capture_tokens and target.provider == "local" and cfg.executor.kind != "local":
        raise BadInput("--capture-tokens with a local: target runs with --executor local only (each Ray node "
                       "serves its own model, and the recording proxy runs in this process)")
    return target.captures_tokens or cfg.capture_tokens


@contextmanager
def token_capture(target: ModelSpec, store: RunStore, env: ProviderEnv, cfg: RunConfig, emit: Emitter,
                  host: str = "127.0.0.1"):
    """For vLLM targets and `--capture-tokens`: the recording proxy for the whole run (token ids +
    logprobs per call), on `host`: where the rollouts reach this process (a Ray cluster's nodes: the
    driver node's address)."""
    if not captures_tokens(cfg, target):
        yield None
        return
    from skillopt.traces.tokens import TokenCapture

    emit(Note(f"starting token capture (recording proxy for the {target.provider} target)"))
    reply = cfg.harness_options.get("max_output_tokens")  # a local server started here caps agents' replies
    with TokenCapture(target, store.paths.tokens, env=env, repo=cfg.benchmark, host=host,
                      reply_tokens=reply if isinstance(reply, int) else None) as capture:
        yield capture
