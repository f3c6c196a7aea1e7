"""Which models a run uses when the user names none, or only one of target and optimizer.

One function decides it (`choose_models`), and the CLI and the Python API both call it. The
policy, in words the note it returns repeats:

- both given: used as given, no note;
- only one given: the other is the same model (`local:` models: the local default for its role),
  named in the note: a model the user did not name is never a different paid one;
- none given: a provider whose key is set (the note names the variable that led to it: a paid
  model is never chosen silently), else the embedded local models, which cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from skillopt.models.types import ProviderEnv

# The 1.5B in both roles: the 0.5B answers GSM8K-style tasks the way the task's own last line says
# whatever its skill asks (perf/results/headroom.json), so no skill could teach it; the 1.5B follows
# its skill (headroom-1.5b.json) and the quick job learns with it (quality.json). One server serves both.
LOCAL_TARGET = "local:qwen2.5-coder-1.5b"
LOCAL_OPTIMIZER = "local:qwen2.5-coder-1.5b"

# (variable, target, optimizer), in the order they are tried when no model is named
KEYED_DEFAULTS: tuple[tuple[str, str, str], ...] = (
    ("OPENAI_API_KEY", "openai:gpt-5-mini", "openai:gpt-5"),
    ("ANTHROPIC_API_KEY", "anthropic:claude-haiku-4-5", "anthropic:claude-sonnet-4-5"),
)


@dataclass(frozen=True)
class ModelChoice:
    target: str
    optimizer: str
    note: str | None  # one line saying what was defaulted and why; None when both were given


def _has(env: ProviderEnv, variable: str) -> bool:
    return bool(getattr(env, variable.lower(), None))


def choose_models(target: str | None, optimizer: str | None, env: ProviderEnv,
                  need_optimizer: bool = True) -> ModelChoice:
    """The target and optimizer model specs a run uses, and a note when any was defaulted."""
    target, optimizer = (target or "").strip(), (optimizer or "").strip()
    if target and (optimizer or not need_optimizer):
        return ModelChoice(target, optimizer, None)
    if target or optimizer:
        given, role = (target, "target") if target else (optimizer, "optimizer")
        other_role = "optimizer" if role == "target" else "target"
        other = given
        if given.startswith("local:"):
            other = LOCAL_OPTIMIZER if other_role == "optimizer" else LOCAL_TARGET
        flag = f"--{other_role}-model"
        note = (f"no {flag} given: using {other} as the {other_role} "
                f"({'the same model as the ' + role if other == given else 'the local default'}); "
                f"pass {flag} to choose another")
        t, o = (given, other) if role == "target" else (other, given)
        return ModelChoice(t, o, note)
    for variable, t, o in KEYED_DEFAULTS:
        if _has(env, variable):
            roles = f"{t} (target)" + (f" and {o} (optimizer)" if need_optimizer else "")
            return ModelChoice(t, o, f"no model given and {variable} is set: using {roles}, paid models; "
                                     f"pass --target-model{' and --optimizer-model' if need_optimizer else ''} "
                                     f"to choose")
    roles = f"{LOCAL_TARGET} (target)" + (f" and {LOCAL_OPTIMIZER} (optimizer)" if need_optimizer else "")
    return ModelChoice(LOCAL_TARGET, LOCAL_OPTIMIZER,
                       f"no model given and no API key set: using the embedded local model{'s' if need_optimizer else ''} "
                       f"{roles}")
