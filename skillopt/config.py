"""Run configuration: nested frozen pydantic sections, resolved once at the CLI edge.

Order of precedence: defaults < preset < YAML file < dotted overrides (`--set a.b=c`) < flags. Each
layer is a `ConfigLayer` (where it came from, what it gives), so an error names the layer at fault.
Derived values are properties; nothing writes back into the config.

Over 400 lines: the sections, the presets and the per-layer validation are one concept (what a run is
given and whether it is valid); splitting the range checks from the models they check is issue 31's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skillopt.benchmarks.base import SplitSizes
from skillopt.errors import BadInput
from skillopt.harness.base import Limits
from skillopt.models.meter import Budget
from skillopt.optimizer.template import TemplateName
from skillopt.io.files import read_user_text
from skillopt.io.redact import redact

Count = Annotated[int, Field(ge=1, le=1_000_000)]  # sizes and counts: at least one (and not absurd)
Seconds = Annotated[float, Field(gt=0, le=7 * 86400)]  # a week at most
Workers = Annotated[int, Field(ge=1, le=512)]  # things run at once
Price = Annotated[float, Field(ge=0, le=10_000)]  # USD per million tokens


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class LearningRate(_Frozen):
    """How many edits a step may apply, scheduled over the steps of the run."""

    initial: Count = 3
    final: Count = 1
    schedule: Literal["constant", "linear", "cosine"] = "constant"


class TrainConfig(_Frozen):
    epochs: Annotated[int, Field(ge=1, le=1000)] = 2
    batch_size: Count = 8
    minibatch_size: Count = 4
    trials: Annotated[int, Field(ge=1, le=100)] = 1
    concurrency: Workers = 4
    learning_rate: LearningRate = LearningRate()
    skill_token_cap: Count = 2000
    include_successes: Annotated[int, Field(ge=0)] = 2  # successes shown per reflection minibatch
    consolidate: bool = True
    summary_tokens: Count = 400  # budget of each trace summary shown to the optimizer
    max_reflections_per_step: Annotated[int, Field(ge=0)] = 3  # reflections per step, each one candidate (0: none)
    demonstrations: bool = True  # propose a worked example from a solved train task
    merge: bool = True  # propose a merge of two complementary pool members
    ablations_per_step: Annotated[int, Field(ge=0)] = 1  # single-edit candidates out of rejected bundles
    screen: bool = True  # check each candidate on its train tasks before validation (GEPA's minibatch test)
    leakage_check: bool = True  # reject edits that copy task text, before any rollout
    retry_errored: Annotated[int, Field(ge=0, le=100)] = 2  # extra tries of a rollout that errored (infrastructure), later
    description: bool = False  # also train the front-matter description (whether agents load the skill)
    rules_per_step: Annotated[int, Field(ge=0)] = 2  # rules learned from the scorer's feedback, one per cluster
    rule_examples: Annotated[int, Field(ge=0, le=5)] = 2  # train answers each rule quotes: expected vs written
    # a rule of answer form when >= 2 of a step's failures differ from their expected answers the same way
    # (a sentence for a bare name, words for a number): fixed wording chosen by the data (optimizer/form.py)
    form_rules: bool = True
    # a step's closed answer set (a few short labels its tasks' expected answers reuse: entailment /
    # not_entailment, yes / no), counted by code and shown to the reflection and rules prompts
    # (optimizer/facts.py `label_facts`); False: not shown (the suite's `no-label-facts` arm)
    label_facts: bool = True
    # with a closed answer set, a rule naming its labels as the data writes them, proposed by code when >= 2
    # of a step's failures answered none of them (optimizer/form.py; candidate kind `label-rule`)
    label_rule: bool = False
    # agent harnesses only (claude-code, codex, mini-swe-agent; optimizer/agent.py): one edit per reflection over
    # failed trajectories (0: none), a numbered procedure from what passing trajectories did, a solved
    # trajectory condensed into steps (in place of the chat-style worked example)
    trajectory_reflections: Annotated[int, Field(ge=0)] = 2
    procedure: bool = True
    trajectory_demonstration: bool = True
    # agent harnesses: a rule in fixed wording (where commands run, how code reaches a file) when >= 2 of a step's
    # failed rollouts sent Python source to the shell as a command (optimizer/agent.py; candidate kind `shell-rule`)
    shell_rule: bool = True
    # fixed wording the optimizer may add on its own (optimizer/template.py): "working-first" asks for numbered
    # steps before the answer (teacher, worked example, first reflection angle); "none" keeps them neutral;
    # "learned": the optimizer writes the reply's shape the teacher is asked and the example opens with
    template: TemplateName = "working-first"
    # with template "learned": the optimizer's reply shape is also a candidate on its own, as the skill's
    # "How to reply" section, once the teacher following it solved a failed train task (origin "shape")
    shape_edit: bool = True
    # lessons from a contrast (optimizer/lessons.py): per step, up to this many failed train tasks the teacher
    # solved, each read beside the target's failed reply; the optimizer writes the lesson the failure missed
    # (chat harness). Off (0) until the development suite's `lessons` arm shows it pays
    lessons_per_step: Annotated[int, Field(ge=0)] = 0
    # short-answer tasks (exact / f1 scorers): up to this many of a step's train questions shown with the
    # answers the data expects, failed ones first, as one candidate (optimizer/answers.py; no optimizer
    # call). Off (0) until the development suite's `answer-examples` arm shows it pays
    answer_examples: Annotated[int, Field(ge=0)] = 0
    # a second draw of an edit the screen turned down (optimizer/revise.py): per step, up to this many of the
    # optimizer's own edits (reflection, rule, lesson) are written again with the target's replies under them
    # beside its replies without them, then prepared and screened as a candidate of their own (origin
    # "revision"). Off (0) until the development suite's `revise` arm shows it pays
    revisions_per_step: Annotated[int, Field(ge=0)] = 0
    # at the first step whose batch has a failure, each protected region of the skill is left out once and tried
    # on that batch (engine/protected.py): the run then says when a region the optimizer may not edit is what
    # makes the target fail (one batch of rollouts per region; the skill is never changed by it)
    check_protected: bool = True
    # reuse the seed's val / test rollouts that an earlier run made with the same data, model and settings
    # (kept under the user's cache folder: engine/rollout_cache.py); False: run them again
    seed_cache: bool = True
    # with an embedded (local:) model: reuse every rollout and reply an earlier run got from it for the
    # same request (models/replay.py), so a run that is only repeated makes no model call; False: only
    # what seed_cache keeps
    replay: bool = True


class GateConfig(_Frozen):
    """The sequential paired sign test that accepts a candidate (see optimizer/sequential_test.py)."""

    metric: Literal["hard", "soft"] = "hard"
    alpha: Annotated[float, Field(gt=0, le=0.5)] = 0.05  # chance of accepting a candidate that is no better (one-sided)
    min_effect: Annotated[float, Field(gt=0, le=1)] = 0.1  # improvement per pair worth detecting; below it, stop early
    interim_alpha: Annotated[float, Field(ge=0, le=0.5)] = 0.005  # p-value that accepts before every pair is in
    futility: Annotated[float, Field(ge=0, lt=1)] = 0.05  # stop when the chance of still accepting falls below this
    trials: Annotated[int, Field(ge=1, le=100)] = 1  # pairs per validation task
    deterministic: Literal["auto", "on", "off"] = "auto"  # temperature 0 + seed where the target allows
    seed: int = 0  # sampling seed of deterministic rollouts
    per_step: Count = 1  # screened candidates gated per step, best screen first, until one is accepted; they
    # share alpha: each is tested at alpha / (the number gated), so a step's false-accept rate stays at most alpha
    noninferiority_margin: Annotated[float, Field(ge=0, lt=1)] = 0.05  # consolidation: accepted when not worse than this
    early_stop: bool = True  # False: every pair of every decision (no interim accept, no futility)
    trigger_weight: Annotated[float, Field(ge=0)] = 0.0  # agent harnesses: a pair's value is its score plus
    # this much when the agent loaded the skill (0: score only); with train.description on, 0.5 breaks ties

    @model_validator(mode="before")
    @classmethod
    def _drop_old(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min_delta" in data:  # runs made before the sequential test
            data = {k: v for k, v in data.items() if k != "min_delta"}
        return data

    @model_validator(mode="after")
    def _interim_within_alpha(self) -> GateConfig:
        if self.interim_alpha > self.alpha:
            raise ValueError(f"interim_alpha ({self.interim_alpha}) must not exceed alpha ({self.alpha}): an interim "
                             "look accepts on stronger evidence than the last")
        return self


class ModelsConfig(_Frozen):
    timeout_s: Seconds = 180.0
    retries: Annotated[int, Field(ge=0, le=100)] = 4  # retries after the first try of a call (0: one try)
    retry_base_delay_s: Annotated[float, Field(ge=0, le=600)] = 1.0
    optimizer_temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    optimizer_max_tokens: Count = 2048
    prices: dict[str, tuple[Price, Price]] = Field(default_factory=dict)  # (input, output) per 1M tokens


class ExecutorConfig(_Frozen):
    """Where rollouts run (engine/executor.py): `local`, in this process, or `ray`, spread over the
    nodes of a Ray cluster (engine/ray_executor.py). The rest is for `ray`: what one rollout asks
    of a node, how often a rollout whose worker or node was lost runs again, and where on the node
    its workspace goes. Never part of the settings that matter: a run may resume on either."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = None  # "auto" (default: $RAY_ADDRESS or a cluster started here), HOST:PORT, ray://HOST:10001
    num_cpus: Annotated[float, Field(ge=0)] = 1.0  # per rollout
    memory_mb: Count | None = None  # per rollout (Ray's memory resource)
    resources: dict[str, float] = Field(default_factory=dict)  # more per rollout; container benchmarks add docker: 1
    max_retries: Annotated[int, Field(ge=0, le=100)] = 3  # a rollout whose worker or node was lost runs again elsewhere
    work_dir: str | None = None  # on each node: workspaces and grading logs (default: its temp folder)


class RunConfig(_Frozen):
    benchmark: str = "gsm8k"
    harness: str = "chat"
    target_model: str = ""
    optimizer_model: str = ""
    seed_skill: str | None = None
    run_id: str | None = None
    splits: SplitSizes = SplitSizes()
    train: TrainConfig = TrainConfig()
    gate: GateConfig = GateConfig()
    limits: Limits = Limits()
    budget: Budget = Budget()
    models: ModelsConfig = ModelsConfig()
    harness_options: dict[str, Any] = Field(default_factory=dict)
    benchmark_options: dict[str, Any] = Field(default_factory=dict)
    sandbox: bool = True  # agents (and tests of their code) run in bubblewrap; False: --no-sandbox
    capture_tokens: bool = False  # token-level data of every call (vllm: targets always; local: and openai-compatible: on request)
    executor: ExecutorConfig = ExecutorConfig()  # where rollouts run: local or a Ray cluster
    # what makes two rollouts the same, the resume fingerprint: skillopt.engine.settings


class StoredConfig(RunConfig):
    """A run's config.yaml (and `RunStarted.config`): the resolved `RunConfig`, redacted (`redacted`),
    with what an eval run adds. Part of the run schema (`skillopt.store.schema`)."""

    mode: Literal["train", "eval"] = "train"
    skill: str | None = None  # eval: the skill it scored
    split: str | None = None  # eval: the split it scored

    @classmethod
    def of(cls, cfg: RunConfig, **extra: Any) -> StoredConfig:
        """`cfg` as a run stores it: secrets masked, unset limits left out, plus `extra` (mode, skill, split)."""
        return cls.model_validate({**redacted(cfg), **extra})

    def layer(self) -> dict[str, Any]:
        """The keys config.yaml holds, as a configuration layer (for a resume, `eval`, `compare`)."""
        return self.model_dump(mode="json", exclude_unset=True)


PRESETS: dict[str, dict[str, Any]] = {
    # Sized so a full run on a 2-core laptop with the embedded 1.5B model (both roles) takes about 15 minutes.
    "quick": {
        "benchmark": "gsm8k",
        "splits": {"seed": 0, "train": 8, "val": 40, "test": 60},
        "train": {"epochs": 1, "batch_size": 8, "minibatch_size": 4, "concurrency": 4,
                  "learning_rate": {"initial": 2, "final": 1, "schedule": "constant"},
                  "skill_token_cap": 800, "include_successes": 1, "consolidate": False,
                  "summary_tokens": 200, "max_reflections_per_step": 2,
                  # rules from the scorer's feedback (2 optimizer calls a step): on RTE, whose labels the
                  # question never names, the accepted rule named them (development split seed 0: test
                  # 0.000 -> 0.750); on GSM8K they are screened out (the development suite, perf/suite.py)
                  "rules_per_step": 2},
        # a step's second screened candidate is gated when the first is rejected (each at alpha / 2): in every
        # mbpp-bash report row a worked example passed its screen and was never gated
        "gate": {"per_step": 2},
        "limits": {"max_tokens": 320, "timeout_s": 300},
        # the embedded model's calls time out on its progress, never while queued (models/local/progress.py);
        # 900 s is for other servers the preset may be pointed at
        "models": {"optimizer_max_tokens": 768, "timeout_s": 900},
    },
}


@dataclass(frozen=True)
class ConfigLayer:
    """One layer of settings and where it came from, so that an error names it: a stored run's
    config.yaml, a preset, a YAML file, a `--set` item, the flags."""

    source: str  # as an error names it: "preset quick", "config file run.yaml", "--set gate.alpha=2", ...
    values: Mapping[str, object]

    def gives(self, loc: Sequence[str | int]) -> bool:
        """Whether this layer gives a value at the dotted path `loc` (or under it)."""
        node: object = self.values
        for part in loc:
            node = node.get(str(part)) if isinstance(node, Mapping) else None
            if node is None:
                return False
        return True


def deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(item: str) -> dict[str, Any]:
    """`train.epochs=3` -> {"train": {"epochs": 3}}; values are parsed as YAML scalars."""
    if "=" not in item:
        raise BadInput(f"bad override {item!r}: write --set section.key=value (e.g. --set train.epochs=3)")
    path, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        why = str(e).splitlines()[0]
        raise BadInput(f"bad override {item!r}: its value is not valid YAML ({why}); quote it "
                       f"(--set '{path}=\"...\"')") from None
    if not path.strip() or any(not part.strip() for part in path.split(".")):
        raise BadInput(f"bad override {item!r}: write --set section.key=value (e.g. --set train.epochs=3)")
    out: dict[str, Any] = value
    for part in reversed(path.strip().split(".")):
        out = {part: out}
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    text = read_user_text(p, "config file")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise BadInput(f"config file {p} is not valid YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise BadInput(f"config file {p} must hold a mapping of settings")
    return data


def resolve_config(*layers: ConfigLayer | Mapping[str, Any], source: str = "configuration") -> RunConfig:
    """The layers merged (a later one wins; None: not given) and validated. An error names the layers
    that gave the bad value; a bare mapping is a layer named `source`."""
    named = [layer if isinstance(layer, ConfigLayer) else ConfigLayer(source, layer) for layer in layers]
    merged: dict[str, Any] = {}
    for layer in named:
        merged = deep_merge(merged, {k: v for k, v in layer.values.items() if v is not None})
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            value = err.get("input")
            while isinstance(value, dict) and len(value) == 1:  # `gaet.alpha=3`: the whole path the user wrote
                key, value = next(iter(value.items()))
                loc += (key,)
            raise BadInput(f"unknown setting {'.'.join(map(str, loc))} in {_givers(named, loc, source)}"
                           f"{_suggest(loc)}") from None
        where = ".".join(map(str, loc))
        raise BadInput(f"bad setting {where} in {_givers(named, loc, source)}: {err['msg']}") from None


def _givers(layers: Sequence[ConfigLayer], loc: Sequence[str | int], fallback: str) -> str:
    """The sources of the layers that give a value at `loc`, in order (`fallback` when none does)."""
    names = list(dict.fromkeys(layer.source for layer in layers if layer.gives(loc)))
    return " and ".join(names) if names else fallback


def setting_names(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every dotted setting name (`train.epochs`, `gate.alpha`, ...); free-form maps end at their name."""
    model = model or RunConfig
    out = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out += setting_names(sub, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def _suggest(loc: tuple) -> str:
    """'; did you mean train.epochs?' for the nearest valid name, else the valid names there."""
    import difflib

    dotted = ".".join(str(x) for x in loc)
    names = setting_names()
    near = difflib.get_close_matches(dotted, names, n=1, cutoff=0.6)
    if not near:  # a misspelt leaf: compare within its section
        section = ".".join(str(x) for x in loc[:-1])
        leaves = ([n for n in names if n.rsplit(".", 1)[0] == section] if section
                  else list(dict.fromkeys(n.split(".")[0] for n in names)))
        near = difflib.get_close_matches(dotted, leaves, n=1, cutoff=0.4)
        if not near:
            return f": valid names are {', '.join(leaves[:30])}" if leaves else ""
    return f"; did you mean {near[0]}? (skillopt config show lists every setting)"


def flags_layer(**values: Any) -> dict[str, Any]:
    """Keyword settings as a config layer: `train__epochs=3` or `{"train.epochs": 3}` -> nested;
    None means 'not given'."""
    layer: dict[str, Any] = {}
    for dotted, value in values.items():
        if value is None:
            continue
        parts = dotted.replace("__", ".").split(".")
        node = layer
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return layer


def build_config(*, base: Sequence[ConfigLayer] = (), preset: str | None = None,
                 files: Sequence[str | Path | Mapping[str, Any] | None] = (),
                 overrides: Sequence[str | Mapping[str, Any]] = (),
                 flags: Mapping[str, Any] | None = None) -> RunConfig:
    """The one path from what a user gave to a `RunConfig`: base layers (a resumed run's own
    settings), a preset, YAML files (or mappings), `--set` overrides, then flags (later wins), each a
    `ConfigLayer` named for the errors. The CLI's `run`, `config show` and the Python API all build
    through here."""
    layers: list[ConfigLayer] = list(base)
    if preset:
        if preset not in PRESETS:
            raise BadInput(f"unknown preset {preset!r}: choose one of {', '.join(PRESETS)}")
        layers.append(ConfigLayer(f"preset {preset}", PRESETS[preset]))
    for f in files:
        if f:
            layers.append(check_layer(ConfigLayer("the config", f) if isinstance(f, Mapping)
                                      else ConfigLayer(f"config file {f}", load_yaml(f))))
    for o in overrides:
        layers.append(check_layer(ConfigLayer("set=", o) if isinstance(o, Mapping)
                                  else ConfigLayer(f"--set {o}", parse_override(o))))
    layers.append(check_layer(ConfigLayer("the flags", flags_layer(**(flags or {})))))
    return canonical_names(resolve_config(*layers))


NAMES = ("benchmark", "harness", "target_model", "optimizer_model", "seed_skill", "run_id")  # never ""


def check_layer(layer: ConfigLayer) -> ConfigLayer:
    """Each value one layer gives is valid for its setting on its own, before the layers merge: a
    later layer (a flag) setting the same key must not hide an invalid value (`--set train.epochs=abc
    --epochs 2`). Unknown names are left to `resolve_config`, which suggests the nearest; settings
    that depend on each other (interim_alpha <= alpha) are checked there, after the merge."""
    _check_values(layer.values, layer.source, RunConfig)
    return layer


def _check_values(values: Mapping[str, object], source: str, model: type[BaseModel], prefix: str = "") -> None:
    from pydantic import TypeAdapter

    for key, value in values.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None or value is None:
            continue
        dotted = f"{prefix}{key}"
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(value, Mapping):
            _check_values(value, source, sub, f"{dotted}.")
            continue
        if not prefix and key in NAMES and isinstance(value, str) and not value.strip():
            raise BadInput(f"bad setting {dotted} in {source}: it is empty; give a value or leave it out")
        if isinstance(value, bool) and _takes_int(sub):
            raise BadInput(f"bad setting {dotted} in {source}: {value} is not a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"bad setting {dotted} in {source}: {value} is not a finite number")
        try:
            # the field's type with its constraints (ge, le, ...), built at run time from the field
            kind = Annotated[(sub, *field.metadata)] if field.metadata else sub  # type: ignore[valid-type]
            TypeAdapter(kind).validate_python(value)
        except ValidationError as e:
            err = e.errors()[0]
            inner = ".".join(str(x) for x in err["loc"])
            raise BadInput(f"bad setting {dotted}{'.' + inner if inner else ''} in {source}: {err['msg']}") from None


def _takes_int(annotation: Any) -> bool:
    """An int setting (possibly optional or constrained), which a YAML `true` must not fill as 1."""
    import typing

    if annotation is int:
        return True
    return any(_takes_int(a) for a in typing.get_args(annotation) if not isinstance(a, (str, bytes)))


def canonical_names(cfg: RunConfig) -> RunConfig:
    """Benchmark and harness names as registered (names are case-insensitive: `GSM8K` is `gsm8k`)."""
    from skillopt.benchmarks.registry import benchmark_info, is_jsonl_path, split_argument

    update: dict[str, str] = {"harness": cfg.harness.lower()}
    name, arg = split_argument(cfg.benchmark)
    if not is_jsonl_path(cfg.benchmark) and name.lower() != name:
        try:
            update["benchmark"] = benchmark_info(name).name + ("" if arg is None else f":{arg}")
        except BadInput:
            pass  # unknown: said where the benchmark is opened, with the known names
    return cfg.model_copy(update=update)


def with_default_models(cfg: RunConfig, env: Any, need_optimizer: bool = True) -> tuple[RunConfig, str | None]:
    """`cfg` with its target / optimizer filled in by `models.defaults.choose_models`, and its note."""
    from skillopt.models.defaults import choose_models

    choice = choose_models(cfg.target_model, cfg.optimizer_model, env, need_optimizer)
    if choice.note is None:
        return cfg, None
    update = {"target_model": choice.target}
    if need_optimizer:
        update["optimizer_model"] = choice.optimizer
    return cfg.model_copy(update=update), choice.note


def redacted(cfg: RunConfig) -> dict[str, Any]:
    """The config as written to config.yaml, the index and trackers: every secret masked (at any
    depth, in URLs, known values). A resume gives the masked values again (see engine/training.py)."""
    data = cfg.model_dump(mode="json")
    for k in ("max_tokens", "stop"):  # unset: the benchmark's own (engine.settings.effective_limits)
        if k not in cfg.limits.model_fields_set:
            data["limits"].pop(k, None)
    return redact(data)


# The settings a command line flag (and a keyword of skillopt.train / evaluate) names directly:
# flag (snake_case) -> dotted setting. Every other setting is reached with --set / set=.
FLAG_SETTINGS: dict[str, str] = {
    "benchmark": "benchmark", "harness": "harness", "target_model": "target_model",
    "optimizer_model": "optimizer_model", "skill": "seed_skill", "run_id": "run_id",
    "epochs": "train.epochs", "batch_size": "train.batch_size", "concurrency": "train.concurrency",
    "trials": "train.trials", "learning_rate": "train.learning_rate.initial",
    "schedule": "train.learning_rate.schedule", "train_description": "train.description",
    "train_size": "splits.train", "val_size": "splits.val", "test_size": "splits.test", "split_seed": "splits.seed",
    "max_cost_usd": "budget.max_cost_usd", "max_rollouts": "budget.max_rollouts", "max_tokens": "budget.max_tokens",
    "harness_mode": "harness_options.mode", "sandbox": "sandbox", "capture_tokens": "capture_tokens",
    "executor": "executor.kind", "ray_address": "executor.address",
}


def default_of(dotted: str) -> Any:
    """The default value of a dotted setting (for help texts): `default_of("train.epochs")` -> 2."""
    node: Any = RunConfig()
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def settings_from_flags(values: dict[str, Any], where: str = "flag") -> dict[str, Any]:
    """Flag values (None: not given) as a config layer, through `FLAG_SETTINGS`."""
    import difflib

    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in FLAG_SETTINGS:
            near = difflib.get_close_matches(name, FLAG_SETTINGS, n=1)
            hint = f"; did you mean {near[0]}?" if near else f"; known: {', '.join(FLAG_SETTINGS)}"
            raise BadInput(f"unknown {where} {name!r}{hint} (other settings: set={{'section.key': value}})")
        if value is not None:
            out[FLAG_SETTINGS[name]] = value
    return out
