"""The child process of the `mini-swe-agent` harness: the package's own agent loop, reporting as it goes.

Run inside the sandbox as `python -I mini_swe_driver.py SPEC.json`, by an interpreter that has the
`mini-swe-agent` package. It imports nothing of skillopt (the sandbox shows it only this file and
the interpreter's packages). The spec (written by `skillopt.harness.mini_swe_agent`) names the
package's config (`mini.yaml`: bash tool calls; `mini_textbased.yaml`: a fenced bash block), the
text added to its instance template (the skill; the template's example response left out when the
harness says so), its format error message where the harness gives one, the model (an OpenAI-compatible endpoint: the
relay; its URL and token come in `SKILLOPT_MINI_BASE_URL` and `SKILLOPT_MINI_API_KEY`, removed from the environment before any command
runs) and the limits.

It runs mini-swe-agent's `DefaultAgent` with its `LitellmModel` (or `LitellmTextbasedModel`) and
`LocalEnvironment` in the working folder, unchanged but for one hook: every message the agent adds
(system, task, model reply with its actions, command output, format error, exit) is printed on
stdout as one JSON line `{"mini": "message", "message": ...}` (the model's raw response replaced by
its token usage), then `{"mini": "done", ...}` with the exit status and submission. Exit code 0
whenever the agent loop ran, 3 when it raised.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path


def _emit(kind: str, **data) -> None:
    sys.stdout.write(json.dumps({"mini": kind, **data}, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _slim(message: dict) -> dict:
    """A message as reported: the raw model response replaced by its usage (the rest kept)."""
    out = {k: v for k, v in message.items() if k != "extra"}
    extra = dict(message.get("extra") or {})
    response = extra.pop("response", None)
    if isinstance(response, dict):
        usage = response.get("usage") or {}
        extra["usage"] = {"prompt_tokens": usage.get("prompt_tokens") or 0,
                          "completion_tokens": usage.get("completion_tokens") or 0,
                          "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0}
        choice = (response.get("choices") or [{}])[0] or {}
        extra["finish_reason"] = choice.get("finish_reason")
        if extra.get("interrupt_type") == "FormatError":  # the reply it rejected is in no other message
            extra["model_reply"] = str((choice.get("message") or {}).get("content") or "")[:4000]
    if isinstance(extra.get("traceback"), str):
        extra["traceback"] = extra["traceback"][-2000:]
    out["extra"] = extra
    return out


def _instance_template(template: str, skill_text: str, position: str = "task") -> str:
    """The package's instance template with the skill's paragraph (Jinja-escaped) after the task, or at
    the end (`position` "end")."""
    if not skill_text:
        return template
    block = "{% raw %}" + skill_text.strip() + "{% endraw %}"
    if position == "end":
        return template.rstrip("\n") + "\n\n" + block + "\n"
    lines = template.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if "{{task}}" in line.replace(" ", ""):
            return "".join(lines[:i + 1]) + "\n" + block + "\n" + "".join(lines[i + 1:])
    return block + "\n\n" + template


def _without_example(template: str) -> str:
    """The instance template without its example response (and the heading and line that introduce it)."""
    out = re.sub(r"## Formatting your response\n.*?</example_response>\n*", "", template, flags=re.DOTALL)
    return re.sub(r"([^\n]*[Ee]xample[^\n]*:\n+)?<example_response>.*?</example_response>\n*", "", out,
                  flags=re.DOTALL)


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    key = os.environ.pop("SKILLOPT_MINI_API_KEY", "")  # the relay's token: not for the agent's commands
    base_url = os.environ.pop("SKILLOPT_MINI_BASE_URL", "")
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_path
    from minisweagent.environments.local import LocalEnvironment

    config = yaml.safe_load(get_config_path(spec["config"]).read_text(encoding="utf-8"))
    agent_cfg = {k: v for k, v in (config.get("agent") or {}).items() if k in (
        "system_template", "instance_template", "max_consecutive_format_errors")}
    template = agent_cfg["instance_template"]
    if spec.get("example_response") is False:
        template = _without_example(template)
    agent_cfg["instance_template"] = _instance_template(template, spec.get("skill_text", ""),
                                                       spec.get("skill_position", "task"))
    agent_cfg.update(step_limit=int(spec["step_limit"]), cost_limit=0.0,
                     output_path=spec.get("trajectory") and Path(spec["trajectory"]))
    model_cfg = dict(config.get("model") or {})
    model_cfg.update(model_name=spec["model_name"], cost_tracking="ignore_errors")
    if spec.get("format_error_template"):
        model_cfg["format_error_template"] = spec["format_error_template"]
    model_cfg["model_kwargs"] = {**(model_cfg.get("model_kwargs") or {}), **spec.get("model_kwargs", {}),
                                 "api_key": key or "no-key", **({"api_base": base_url} if base_url else {})}
    env_cfg = dict(config.get("environment") or {})
    env_cfg.pop("environment_class", None)
    env_cfg.update(cwd=spec["cwd"], timeout=int(spec.get("command_timeout_s", 60)))
    if spec.get("text_actions"):
        from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel as Model
    else:
        from minisweagent.models.litellm_model import LitellmModel as Model
    model_cfg.pop("model_class", None)

    class ReportingAgent(DefaultAgent):
        def add_messages(self, *messages: dict) -> list[dict]:
            for m in messages:
                _emit("message", message=_slim(m))
            return super().add_messages(*messages)

    agent = ReportingAgent(Model(**model_cfg), LocalEnvironment(**env_cfg), **agent_cfg)
    try:
        info = agent.run(spec["task"])
    except Exception as e:  # the loop already added an exit message; say how it ended
        _emit("done", exit_status=type(e).__name__, error=f"{type(e).__name__}: {e}"[:2000], api_calls=agent.n_calls)
        return 3
    _emit("done", exit_status=info.get("exit_status", ""), submission=info.get("submission", ""),
          api_calls=agent.n_calls)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
