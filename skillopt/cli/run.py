"""`skillopt run` and `skillopt eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from skillopt.cli.app import Globals, app, console, load_env, protect
from skillopt.cli.progress import ProgressView, print_summary
from skillopt.config import PRESETS, load_yaml, parse_override, resolve_config
from skillopt.models.types import ProviderEnv

LOCAL_DEFAULT = "local:qwen2.5-coder-0.5b"
LOCAL_OPTIMIZER = "local:qwen2.5-coder-1.5b"


def default_models(env: ProviderEnv) -> tuple[str, str, str | None]:
    """(target, optimizer, note) when the user named none: a provider with a key, else the local model."""
    if env.openai_api_key:
        return "openai:gpt-5-mini", "openai:gpt-5", "no model given: using openai:gpt-5-mini (target) and openai:gpt-5 (optimizer)"
    if env.anthropic_api_key:
        return ("anthropic:claude-haiku-4-5", "anthropic:claude-sonnet-4-5",
                "no model given: using anthropic:claude-haiku-4-5 (target) and anthropic:claude-sonnet-4-5 (optimizer)")
    return (LOCAL_DEFAULT, LOCAL_OPTIMIZER,
            f"no API key set: using the embedded local models {LOCAL_DEFAULT} (target) and {LOCAL_OPTIMIZER} (optimizer)")


def _flags(**values: Any) -> dict[str, Any]:
    """CLI flags as a config layer; None means 'not given'."""
    layer: dict[str, Any] = {}
    for dotted, value in values.items():
        if value is None:
            continue
        node = layer
        parts = dotted.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return layer


@app.command(help="""Train a skill: rollouts on train batches, reflection, gated edits, epochs.

Example: skillopt run --benchmark gsm8k --harness chat --target_model openai:gpt-5-mini --optimizer_model openai:gpt-5""")
def run(
    benchmark: str = typer.Option(None, "--benchmark", "-b", help="Benchmark name or a QA .jsonl path."),
    harness: str = typer.Option(None, "--harness", help="chat | claude-code | codex"),
    target_model: str = typer.Option(None, "--target_model", "--target-model", help="Model spec of the agent."),
    optimizer_model: str = typer.Option(None, "--optimizer_model", "--optimizer-model", help="Model spec of the optimizer."),
    skill: Path = typer.Option(None, "--skill", help="Seed SKILL.md (default: skills/<benchmark>/SKILL.md)."),
    config: Path = typer.Option(None, "--config", help="YAML config file."),
    preset: str = typer.Option(None, "--preset", help=f"Settings preset: {', '.join(PRESETS)}."),
    resume: str = typer.Option(None, "--resume", help="Continue the run with this id."),
    run_id: str = typer.Option(None, "--run-id", help="Name the new run."),
    epochs: int = typer.Option(None, "--epochs"),
    batch_size: int = typer.Option(None, "--batch-size"),
    concurrency: int = typer.Option(None, "--concurrency"),
    trials: int = typer.Option(None, "--trials"),
    learning_rate: int = typer.Option(None, "--learning-rate", help="Edits allowed per step."),
    schedule: str = typer.Option(None, "--schedule", help="constant | linear | cosine"),
    train_size: int = typer.Option(None, "--train-size"),
    val_size: int = typer.Option(None, "--val-size"),
    test_size: int = typer.Option(None, "--test-size"),
    split_seed: int = typer.Option(None, "--split-seed"),
    max_cost_usd: float = typer.Option(None, "--max-cost-usd"),
    max_rollouts: int = typer.Option(None, "--max-rollouts"),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Budget of tokens for the whole run."),
    harness_mode: str = typer.Option(None, "--harness-mode", help="sdk | cli | auto (agent harnesses)."),
    overrides: list[str] = typer.Option(None, "--set", help="Dotted override, e.g. --set train.epochs=3."),
    track: list[str] = typer.Option(None, "--track", help="Mirror the run into a tracker: mlflow."),
    tracking_uri: str = typer.Option(None, "--tracking-uri",
                                      help="Tracker URI (default: $MLFLOW_TRACKING_URI, else ./mlruns)."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox",
                                    help="Run agents (and tests of their code) without the bubblewrap sandbox."),
    executor: str = typer.Option(None, "--executor", help="Where rollouts run: local (this process) | ray (a Ray cluster)."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="The Ray cluster: auto (default) | HOST:PORT | ray://HOST:10001."),
) -> None:
    from skillopt.engine.listeners import IndexWriter, MetricsWriter
    from skillopt.engine.run import train
    from skillopt.report.tracking import make_tracker
    from skillopt.store.run import RunStore

    environ = load_env()
    env = ProviderEnv.from_environ(environ)
    runs_dir = Globals.runs_dir
    layers: list[dict[str, Any]] = []
    if resume:
        layers.append(RunStore.open(runs_dir, resume).read_config())
    if preset:
        if preset not in PRESETS:
            raise_bad(f"unknown preset {preset!r}: choose one of {', '.join(PRESETS)}")
        layers.append(PRESETS[preset])
    for path in (Globals.config, config):
        if path:
            layers.append(load_yaml(path))
    layers += [parse_override(o) for o in overrides or []]
    layers.append(_flags(
        benchmark=benchmark, harness=harness, target_model=target_model, optimizer_model=optimizer_model,
        seed_skill=str(skill) if skill else None, run_id=run_id, train__epochs=epochs,
        train__batch_size=batch_size, train__concurrency=concurrency, train__trials=trials,
        train__learning_rate__initial=learning_rate, train__learning_rate__schedule=schedule,
        splits__train=train_size, splits__val=val_size, splits__test=test_size, splits__seed=split_seed,
        budget__max_cost_usd=max_cost_usd, budget__max_rollouts=max_rollouts, budget__max_tokens=max_tokens,
        harness_options__mode=harness_mode, sandbox=False if no_sandbox else None,
        executor__kind=executor or ("ray" if ray_address else None), executor__address=ray_address,
    ))
    cfg = protect(resolve_config(*layers))
    if not cfg.target_model or not cfg.optimizer_model:
        t, o, note = default_models(env)
        cfg = cfg.model_copy(update={"target_model": cfg.target_model or t,
                                     "optimizer_model": cfg.optimizer_model or o})
        if note:
            console.print(note)
    uri = tracking_uri or environ.get("MLFLOW_TRACKING_URI")
    trackers = [make_tracker(name, runs_dir, uri) for name in track or []]
    view = ProgressView(Globals.verbose)
    try:
        summary = train(cfg, runs_dir, env, [view, MetricsWriter(runs_dir), IndexWriter(runs_dir), *trackers],
                        resume=resume)
    finally:
        view.stop()
    print_summary(summary)
    if summary.status == "failed":
        console.print(f"error: the run failed: {summary.stop_reason}")
        raise typer.Exit(1)


def scoring_config(layers: list[dict[str, Any]], config: Path | None, overrides: list[str] | None,
                   env: ProviderEnv, **flags: Any):
    """The config for scoring a skill (eval, compare): base layers, then config files, `--set`
    overrides and flags; the default target when none is named."""
    for path in (Globals.config, config):
        if path:
            layers.append(load_yaml(path))
    layers += [parse_override(o) for o in overrides or []]
    layers.append(_flags(**flags))
    cfg = protect(resolve_config(*layers))
    if not cfg.target_model:
        t, _, note = default_models(env)
        cfg = cfg.model_copy(update={"target_model": t})
        console.print(note)
    return cfg


def raise_bad(message: str) -> None:
    from skillopt.errors import BadInput

    raise BadInput(message)


@app.command("eval", help="""Score one skill on one split.

Example: skillopt eval --skill runs/RUN/best_skill.md --benchmark gsm8k --split test --target_model openai:gpt-5-mini""")
def eval_(
    skill: str = typer.Option(..., "--skill", help="PATH, RUN, RUN:vN or RUN:best."),
    benchmark: str = typer.Option(None, "--benchmark", "-b"),
    split: str = typer.Option("test", "--split", help="train | val | test | all"),
    harness: str = typer.Option(None, "--harness"),
    target_model: str = typer.Option(None, "--target_model", "--target-model"),
    trials: int = typer.Option(None, "--trials"),
    concurrency: int = typer.Option(None, "--concurrency"),
    config: Path = typer.Option(None, "--config"),
    overrides: list[str] = typer.Option(None, "--set"),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Run agents without the bubblewrap sandbox."),
    executor: str = typer.Option(None, "--executor", help="Where rollouts run: local (this process) | ray (a Ray cluster)."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="The Ray cluster: auto (default) | HOST:PORT | ray://HOST:10001."),
) -> None:
    from skillopt.engine.evaluate import evaluate_skill
    from skillopt.store.refs import resolve_skill_ref

    environ = load_env()
    env = ProviderEnv.from_environ(environ)
    ref = resolve_skill_ref(skill, Globals.runs_dir)
    layers: list[dict[str, Any]] = []
    if ref.run is not None:
        from skillopt.engine.settings import scoring_layer

        layers.append(scoring_layer(ref.run.read_config()))
    cfg = scoring_config(layers, config, overrides, env, benchmark=benchmark, harness=harness,
                         target_model=target_model, gate__trials=trials, train__concurrency=concurrency,
                         sandbox=False if no_sandbox else None,
                         executor__kind=executor or ("ray" if ray_address else None), executor__address=ray_address)
    if split not in ("train", "val", "test", "all"):
        raise_bad(f"unknown split {split!r}: use train, val, test or all")
    view = ProgressView()
    try:
        result = evaluate_skill(cfg, ref, split, Globals.runs_dir, env, [view])
    finally:
        view.stop()
    from skillopt.cli.app import out

    out.print(f"{ref.label} on {cfg.benchmark} {split}: hard {result.score.hard:.3f}, soft {result.score.soft:.3f} "
              f"(n={result.score.n}, {result.cached} cached)  [{result.run_id}]")
