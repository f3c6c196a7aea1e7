"""Tracking sinks: engine listeners that mirror a run into an experiment tracker.

`MlflowTracker` logs the resolved config as params, each step's numbers as metrics, every skill
version (and its gate decision) as an artifact, and the summary at the end. A resumed run
continues the same MLflow run (found by its `skillopt.run_id` tag).

Every param and text goes through `io.redact.redact` first (no secret reaches the tracker).
The tracker never stops training: if MLflow fails (server down, bad URI), it logs one warning
and turns itself off. mlflow is imported lazily; pass `mlflow=` to use another module object
(tests pass a small fake).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skillopt.engine.events import (
    Event,
    RunFinished,
    RunStarted,
    StepDone,
    VersionSaved,
)
from skillopt.errors import BadInput, require
from skillopt.io.redact import redact
from skillopt.store.run_store import RunStore

log = logging.getLogger(__name__)

RUN_TAG = "skillopt.run_id"
PARAM_MAX = 500  # characters of a param value (MLflow's oldest limit)
PARAMS_PER_CALL = 100


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """{"train": {"epochs": 2}} -> {"train.epochs": "2"}; lists and scalars become text."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        if not data and prefix:
            out[prefix[:-1]] = "{}"
        return out
    out[prefix[:-1]] = ("" if data is None else str(data))[:PARAM_MAX]
    return out


class MlflowTracker:
    """An engine listener (`skillopt run --track mlflow`).

    `tracking_uri` None means a local `mlruns/` folder under `local_root` (default: the working
    folder): an SQLite store `mlruns/mlflow.db` with artifacts in `mlruns/artifacts/` (MLflow 3
    no longer writes plain file stores). View it with
    `mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db`.
    """

    def __init__(self, runs_dir: Path, tracking_uri: str | None = None, experiment: str = "skillopt",
                 local_root: Path | None = None, mlflow: Any = None):
        self.mlflow = mlflow if mlflow is not None else require("mlflow", "tracking with --track mlflow", "mlflow")
        self.runs_dir = runs_dir
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.local_root = (local_root or Path.cwd()) / "mlruns"
        self.store: RunStore | None = None
        self.step = 0
        self.logged: set[str] = set()
        self.enabled = True

    def __call__(self, event: Event) -> None:
        if not self.enabled:
            return
        try:
            if isinstance(event, RunStarted):
                self._start(event)
            elif self.store is None:
                return
            elif isinstance(event, StepDone):
                self._step(event)
            elif isinstance(event, VersionSaved):
                self._version(event)
            elif isinstance(event, RunFinished):
                self._finish(event)
        except Exception as e:
            self.enabled = False
            log.warning("mlflow tracking turned off after an error: %s: %s", type(e).__name__, e)

    # events ---------------------------------------------------------------------------------------
    def _start(self, event: RunStarted) -> None:
        mlflow = self.mlflow
        if self.tracking_uri:
            mlflow.set_tracking_uri(self.tracking_uri)
        else:
            self.local_root.mkdir(parents=True, exist_ok=True)
            mlflow.set_tracking_uri(f"sqlite:///{(self.local_root / 'mlflow.db').resolve()}")
            if mlflow.get_experiment_by_name(self.experiment) is None:
                mlflow.create_experiment(self.experiment,
                                         artifact_location=(self.local_root / "artifacts").resolve().as_uri())
        mlflow.set_experiment(self.experiment)
        self.store = RunStore(self.runs_dir / event.run_id)
        previous = self._existing(event.run_id) if event.resumed else None
        if previous is not None:
            mlflow.start_run(run_id=previous)
        else:
            mlflow.start_run(run_name=event.run_id, tags={RUN_TAG: event.run_id, "skillopt.mode":
                                                          event.config.mode})
            params = flatten(redact(event.config.layer()))
            items = sorted(params.items())
            for i in range(0, len(items), PARAMS_PER_CALL):
                mlflow.log_params(dict(items[i:i + PARAMS_PER_CALL]))
        self._sync_versions()

    def _existing(self, run_id: str) -> str | None:
        runs = self.mlflow.search_runs(experiment_names=[self.experiment],
                                       filter_string=f"tags.`{RUN_TAG}` = '{run_id}'", output_format="list")
        return runs[0].info.run_id if runs else None

    def _step(self, event: StepDone) -> None:
        self.step = event.step
        self.mlflow.log_metrics(event.metrics.numbers, step=event.step)

    def _version(self, event: VersionSaved) -> None:
        v = event.version
        self._log_version(v.version, v.label)
        if event.gate is not None:
            g = event.gate
            self.mlflow.log_text(redact(g.model_dump_json(indent=2)), f"gates/{v.label}.json")
            step = v.step if v.step is not None else self.step
            self.mlflow.log_metrics({"candidate_score": g.candidate_score,
                                     "candidate_accepted": 1.0 if g.accepted else 0.0}, step=step)

    def _finish(self, event: RunFinished) -> None:
        s = event.summary
        metrics = {}
        for role, by_split in s.scores.items():
            for split, sc in by_split.items():
                if sc is not None:  # no scored rollout: no score metric (never a 0), the errors count
                    if sc.has_score:
                        metrics[f"{role}_{split}_hard"] = sc.hard
                        metrics[f"{role}_{split}_soft"] = sc.soft
                    metrics[f"{role}_{split}_errors"] = sc.errors
        if (lift := s.test_lift) is not None:  # the paired test lift, as the summary and the report show it
            metrics.update({"test_lift": lift.delta, "test_lift_lo": lift.interval.lo,
                            "test_lift_hi": lift.interval.hi, "test_lift_n": lift.n})
        metrics.update({"candidates_accepted": s.candidates_accepted, "candidates_rejected": s.candidates_rejected,
                        "edits_accepted": s.edits_accepted, "edits_rejected": s.edits_rejected,
                        "tokens": s.meter.tokens, "cost_usd": s.meter.known_cost_usd})
        self.mlflow.log_metrics({k: float(v) for k, v in metrics.items()})
        self._sync_versions()
        self.mlflow.log_text(redact(s.model_dump_json(indent=2)), "summary.json")
        best = s.versions.get("best")
        if best is not None and self.store is not None:
            self.mlflow.log_text(redact(self.store.skill(best).render()), "best_skill.md")
        self.mlflow.set_tag("skillopt.status", s.status)
        self.mlflow.end_run(status="FINISHED" if s.status == "finished" else "KILLED")

    # helpers --------------------------------------------------------------------------------------------
    def _sync_versions(self) -> None:
        assert self.store is not None
        for v in RunStore(self.store.root).versions():
            self._log_version(v.version, v.label)

    def _log_version(self, version: int, label: str) -> None:
        if label in self.logged or self.store is None:
            return
        self.mlflow.log_text(redact(self.store.skill(version).render()), f"skills/{label}.md")
        self.logged.add(label)


TRACKERS: dict[str, Callable[..., Callable[[Event], None]]] = {"mlflow": MlflowTracker}


def make_tracker(name: str, runs_dir: Path, tracking_uri: str | None = None) -> Callable[[Event], None]:
    """The listener for `--track NAME`; `BadInput` naming the known trackers otherwise."""
    if name not in TRACKERS:
        raise BadInput(f"unknown tracker {name!r}: choose one of {', '.join(sorted(TRACKERS))}")
    return TRACKERS[name](runs_dir, tracking_uri=tracking_uri)
