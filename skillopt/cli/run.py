"""`skillopt run` and `skillopt eval`: thin layers over `skillopt.train` and `skillopt.evaluate`."""

from __future__ import annotations

from pathlib import Path

import typer

from skillopt.cli.app import EXIT_FAILED, EXIT_STOPPED, Globals, app, console, load_env, out
from skillopt.cli.progress import print_next_steps, print_summary
from skillopt.progress.plain import progress_view
from skillopt.config import FLAG_SETTINGS, PRESETS, default_of


def shown(flag: str) -> str:
    """The default of the setting a flag sets, as `--help` shows it."""
    value = default_of(FLAG_SETTINGS[flag])
    if value is None or value == "":
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


MODEL_DEFAULTS = ("When only one of the two is given, the other is the same model (for a local: model, the local "
                  "default of the other role); with neither, a provider whose key is set (named in a note), else "
                  "the embedded local models.")


@app.command(help="""Train a skill: rollouts on train batches, reflection, gated edits, epochs.

Settings come from defaults < --preset < --config < --set < flags. Every other setting (see
`skillopt config show`) is reached with --set section.key=value.

Exit codes: 0 finished, 1 failed, 2 bad input, 3 stopped by a budget (resume it), 130 interrupted.

Example: skillopt run --benchmark gsm8k --harness chat --target-model openai:gpt-5-mini --optimizer-model openai:gpt-5""")
def run(
    benchmark: str = typer.Option(None, "--benchmark", "-b", show_default=shown("benchmark"),
                                  help="Benchmark name (case-insensitive) or a QA .jsonl path."),
    harness: str = typer.Option(None, "--harness", show_default=shown("harness"), help="chat | claude-code | codex | mini-swe-agent"),
    target_model: str = typer.Option(None, "--target-model", "--target_model", show_default="see below",
                                     help="Model spec of the agent, e.g. openai:gpt-5-mini. " + MODEL_DEFAULTS),
    optimizer_model: str = typer.Option(None, "--optimizer-model", "--optimizer_model", show_default="see --target-model",
                                        help="Model spec of the optimizer, e.g. openai:gpt-5."),
    skill: str = typer.Option(None, "--skill", show_default="skills/<benchmark>/SKILL.md", help="Seed SKILL.md."),
    config: Path = typer.Option(None, "--config", show_default="none", help="YAML config file."),
    preset: str = typer.Option(None, "--preset", show_default="none", help=f"Settings preset: {', '.join(PRESETS)}."),
    resume: str = typer.Option(None, "--resume", show_default="none", help="Continue the run with this id."),
    run_id: str = typer.Option(None, "--run-id", show_default="<time>-<benchmark>-<random>", help="Name the new run."),
    epochs: int = typer.Option(None, "--epochs", show_default=shown("epochs"), help="Passes over the train split."),
    batch_size: int = typer.Option(None, "--batch-size", show_default=shown("batch_size"),
                                   help="Train tasks per step."),
    concurrency: int = typer.Option(None, "--concurrency", show_default=shown("concurrency"),
                                    help="Rollouts in flight at once."),
    trials: int = typer.Option(None, "--trials", show_default=shown("trials"), help="Rollouts per train task."),
    learning_rate: int = typer.Option(None, "--learning-rate", show_default=shown("learning_rate"),
                                      help="Edits one candidate may make."),
    schedule: str = typer.Option(None, "--schedule", show_default=shown("schedule"),
                                 help="Learning-rate schedule: constant | linear | cosine."),
    train_description: bool = typer.Option(None, "--train-description/--no-train-description",
                                           show_default=shown("train_description"),
                                           help="Also train the skill's description (whether agents load the skill)."),
    train_size: int = typer.Option(None, "--train-size", show_default=shown("train_size"), help="Tasks in the train split."),
    val_size: int = typer.Option(None, "--val-size", show_default=shown("val_size"),
                                 help="Tasks in the validation split (the gate's; 20+ recommended)."),
    test_size: int = typer.Option(None, "--test-size", show_default=shown("test_size"),
                                  help="Tasks in the sealed test split."),
    split_seed: int = typer.Option(None, "--split-seed", show_default=shown("split_seed"), help="Seed of the split assignment."),
    max_cost_usd: float = typer.Option(None, "--max-cost-usd", show_default="no limit",
                                       help="Stop at this cost (every model needs a known price)."),
    max_rollouts: int = typer.Option(None, "--max-rollouts", show_default="no limit", help="Stop after this many rollouts."),
    max_tokens: int = typer.Option(None, "--max-tokens", show_default="no limit", help="Stop after this many tokens, all roles."),
    harness_mode: str = typer.Option(None, "--harness-mode", show_default="auto", help="sdk | cli | auto (agent harnesses)."),
    overrides: list[str] = typer.Option(None, "--set", show_default="none",
                                        help="Dotted override, repeatable, e.g. --set gate.alpha=0.1."),
    track: list[str] = typer.Option(None, "--track", show_default="none", help="Mirror the run into a tracker: mlflow."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", show_default="$MLFLOW_TRACKING_URI, else ./mlruns",
                                     help="Tracker URI."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", show_default="sandboxed",
                                    help="Run agents (and tests of their code) without the bubblewrap sandbox."),
    executor: str = typer.Option(None, "--executor", show_default=shown("executor"), help="Where rollouts run: local (this process) | ray (a Ray cluster)."),
    ray_address: str = typer.Option(None, "--ray-address", show_default=shown("ray_address"),
                                    help="The Ray cluster: auto (default) | HOST:PORT | ray://HOST:10001."),
    progress: str = typer.Option("auto", "--progress", help="plain (log lines: a line per phase and every tenth of it "
                                 "or 30 s) | rich (bars) | none | auto (rich on a terminal, else plain)."),
    capture_tokens: bool = typer.Option(False, "--capture-tokens", show_default="on for vllm: targets",
                                        help="Record token ids and logprobs of every call (vllm:, local:, openai-compatible:)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the cost of one rollout (a local model: its time) "
                                 "and the rollouts the run plans; start nothing."),
) -> None:
    from skillopt.api import train

    if dry_run:
        from skillopt.api import dry_run as plan

        notes: list[str] = []
        lines = plan(benchmark, config=config or Globals.config, preset=preset, set=list(overrides or []),
                     skill=skill, env=load_env(), notes=notes, harness=harness, target_model=target_model,
                     optimizer_model=optimizer_model, epochs=epochs, batch_size=batch_size, trials=trials,
                     train_size=train_size, val_size=val_size, test_size=test_size, split_seed=split_seed,
                     harness_mode=harness_mode)
        for n in notes:
            console.print(f"note: {n}", markup=False)
        for line in lines:
            out.print(line, markup=False, highlight=False)
        return

    view = progress_view(progress, Globals.verbose)
    try:
        result = train(
            config=config or Globals.config, preset=preset, set=list(overrides or []), resume=resume,
            runs_dir=Globals.runs_dir, env=load_env(), listeners=[view], track=list(track or []),
            tracking_uri=tracking_uri, benchmark=benchmark, harness=harness, target_model=target_model,
            optimizer_model=optimizer_model, skill=skill, run_id=run_id, epochs=epochs,
            batch_size=batch_size, concurrency=concurrency, trials=trials, learning_rate=learning_rate,
            schedule=schedule, train_description=train_description, train_size=train_size, val_size=val_size,
            test_size=test_size, split_seed=split_seed, max_cost_usd=max_cost_usd, max_rollouts=max_rollouts,
            max_tokens=max_tokens, harness_mode=harness_mode, sandbox=False if no_sandbox else None,
            executor=executor or ("ray" if ray_address else None), ray_address=ray_address,
            capture_tokens=True if capture_tokens else None)
    finally:
        view.stop()
    print_summary(result.summary)
    print_next_steps(result.summary, result.run_dir, Globals.runs_dir)
    if result.status == "failed":
        console.print(f"error: the run failed: {result.summary.stop_reason}")
        raise typer.Exit(EXIT_FAILED)
    if result.status == "stopped":
        raise typer.Exit(EXIT_STOPPED)


@app.command("eval", help="""Score one skill on one split as an evaluation run (RUN:vN reuses the rollouts its run
has; a SKILL.md file is scored afresh).

Example: skillopt eval --skill runs/RUN/best_skill.md --benchmark gsm8k --split test --target-model openai:gpt-5-mini""")
def eval_(
    skill: str = typer.Option(..., "--skill", help="PATH, RUN, RUN:vN or RUN:best."),
    benchmark: str = typer.Option(None, "--benchmark", "-b", show_default="the run's, else gsm8k",
                                  help="Benchmark name or a QA .jsonl path."),
    split: str = typer.Option("test", "--split", help="train | val | test | all"),
    harness: str = typer.Option(None, "--harness", show_default="the run's, else chat", help="chat | claude-code | codex | mini-swe-agent"),
    target_model: str = typer.Option(None, "--target-model", "--target_model", show_default="the run's",
                                     help="Model spec of the agent."),
    trials: int = typer.Option(None, "--trials", show_default="1", help="Rollouts per task."),
    concurrency: int = typer.Option(None, "--concurrency", show_default=shown("concurrency"), help="Rollouts in flight."),
    config: Path = typer.Option(None, "--config", show_default="none", help="YAML config file."),
    overrides: list[str] = typer.Option(None, "--set", show_default="none", help="Dotted override, repeatable."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Run agents without the bubblewrap sandbox."),
    executor: str = typer.Option(None, "--executor", show_default=shown("executor"), help="Where rollouts run: local (this process) | ray (a Ray cluster)."),
    ray_address: str = typer.Option(None, "--ray-address", show_default=shown("ray_address"),
                                    help="The Ray cluster: auto (default) | HOST:PORT | ray://HOST:10001."),
    progress: str = typer.Option("auto", "--progress", help="plain (log lines: a line per phase and every tenth of it "
                                 "or 30 s) | rich (bars) | none | auto (rich on a terminal, else plain)."),
    capture_tokens: bool = typer.Option(False, "--capture-tokens", show_default="on for vllm: targets",
                                        help="Record token ids and logprobs of every call (vllm:, local:, openai-compatible:)."),
) -> None:
    from skillopt.api import evaluate

    view = progress_view(progress, Globals.verbose)
    try:
        result = evaluate(skill, benchmark, split=split, config=config or Globals.config, set=list(overrides or []),
                          runs_dir=Globals.runs_dir, env=load_env(), listeners=[view], harness=harness,
                          target_model=target_model, concurrency=concurrency, trials=trials,
                          sandbox=False if no_sandbox else None,
                          executor=executor or ("ray" if ray_address else None), ray_address=ray_address,
                          capture_tokens=True if capture_tokens else None)
    finally:
        view.stop()
    trigger = f", skill loaded in {result.trigger.text()}" if result.trigger else ""
    sc = result.score  # store.scores: errored rollouts apart, no score without a scored rollout
    soft = f", soft {sc.soft:.3f}" if sc.has_score else ""
    out.print(f"{result.label} on {result.benchmark} {split}: hard {sc.text()}{soft} "
              f"({result.cached} cached{trigger})  [{result.run_id}]", markup=False)

