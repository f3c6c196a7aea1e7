"""A meter that survives crashes: usage and budget come from what a run recorded as it went.

Every rollout is appended to `rollouts.jsonl` as soon as it finishes (errored ones too: they were
paid), and every paid optimizer call to `calls.jsonl` as soon as it returns. A run that starts or
resumes begins its meter from those two logs, never from its last checkpoint; so however often it
is killed, nothing recorded is forgotten, and only the calls that were in flight at a kill (paid,
never recorded) are missing and repeated.
"""

from __future__ import annotations

from skillopt.errors import BadInput
from skillopt.models.meter import Budget, Meter, MeterSnapshot, RoleTotals
from skillopt.models.prices import cost_usd
from skillopt.models.spec import ModelSpec
from skillopt.models.types import CallRecord
from skillopt.store.run_store import RunStore


def recorded_usage(store: RunStore) -> MeterSnapshot:
    """The usage a run recorded: one target call per rollout line, the optimizer's from its calls log."""
    snap = MeterSnapshot()
    for rec in store.rollouts():
        snap.rollouts += 1
        snap.roles.setdefault("target", RoleTotals()).add(CallRecord(
            role="target", model=rec.model, input_tokens=rec.input_tokens, output_tokens=rec.output_tokens,
            cost_usd=rec.cost_usd, ok=rec.error is None))
    for call in store.calls():
        snap.roles.setdefault(call.role, RoleTotals()).add(call)
    return snap


def record_calls(meter: Meter, store: RunStore) -> None:
    """From now on, every paid or failed call outside a rollout (the optimizer's) is appended to the
    run's calls log as it returns. Target calls are recorded with their rollout."""
    def log(rec: CallRecord) -> None:
        if rec.role != "target" and not rec.cached:
            store.append_call(rec)

    meter.listeners.append(log)


def check_prices(budget: Budget, models: dict[str, ModelSpec], prices: dict[str, tuple[float, float]]) -> None:
    """A cost budget needs a price for every model that spends it; else `BadInput` at start."""
    if budget.max_cost_usd is None:
        return
    unknown = [f"{spec} ({role})" for role, spec in models.items() if cost_usd(spec, 1, 1, prices) is None]
    if unknown:
        names = ", ".join(unknown)
        raise BadInput(f"--max-cost-usd cannot be enforced: no price is known for {names}; give one under "
                       f"models.prices in a --config file (\"PROVIDER:MODEL\": [USD per million input tokens, "
                       f"output tokens]), or use --max-tokens / --max-rollouts instead")
