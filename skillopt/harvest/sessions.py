"""Agent sessions as their binaries write them, read into one shape (`Session`).

- Claude Code: `$CLAUDE_CONFIG_DIR/projects/<project>/<session>.jsonl` (default `~/.claude`), one
  JSON record a line: `user` / `assistant` messages (Anthropic content blocks: `text`, `tool_use`,
  `tool_result`), `attachment`s (the `session_context` one holds the git status at the start,
  with the recent commits), and bookkeeping records (`queue-operation`, `api-request`, ...)
  that are skipped. Sidechain (subagent) records, meta messages and the summaries of compacted
  conversations are skipped too.
- Codex: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (default `~/.codex`): `session_meta`
  (id, cwd, git commit), `response_item`s (`message`, `function_call`, `function_call_output`,
  `custom_tool_call` for apply_patch) and `event_msg`s (command exit codes, `turn_aborted`).
  Older releases wrote the same items without the `{type, payload}` envelope; both are read.

Unknown record types are ignored, so a new field or record in a later release does not break
reading; a file with no user request reads as a session with no request (the miner drops it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

Source = Literal["claude-code", "codex"]
SHELL_TOOLS = frozenset({"Bash", "exec_command", "shell", "shell_command", "local_shell"})
EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "apply_patch"})
INTERRUPT_MARK = "[Request interrupted by user"  # Claude Code's text when the user stops a turn
_RUNNING = re.compile(r"^Process running with session ID (\S+)", re.M)
_EXIT = re.compile(r"(?:^Exit code|Process exited with code|^Exit code:)\s*(-?\d+)", re.M)
_SKILL_FILE = re.compile(r"skills/([A-Za-z0-9_.-]+)/SKILL\.md")
_CODEX_CONTEXT = ("<environment_context>", "<user_instructions>", "<skills_instructions>", "# AGENTS.md",
                  "<permissions instructions>", "<INSTRUCTIONS>")


@dataclass
class Call:
    """One tool call and what came back."""

    id: str
    name: str
    input: dict[str, Any]
    t: str = ""
    output: str = ""
    is_error: bool = False
    exit_code: int | None = None
    answered: bool = False
    running: str = ""  # Codex's exec session id while the command has not ended (a later poll ends it)

    @property
    def command(self) -> str | None:
        """The shell command, when the call runs one."""
        if self.name not in SHELL_TOOLS:
            return None
        cmd = self.input.get("command", self.input.get("cmd"))
        if isinstance(cmd, list):
            cmd = cmd[-1] if len(cmd) >= 3 and cmd[-2] in ("-lc", "-c") else " ".join(map(str, cmd))
        return str(cmd) if cmd else None

    @property
    def edited(self) -> tuple[str, ...]:
        """Files this call edited (edit tools, apply_patch)."""
        if self.name == "apply_patch":
            patch = str(self.input.get("input") or self.input.get("patch") or "")
            return tuple(re.findall(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", patch, re.M))
        path = self.input.get("file_path") or self.input.get("notebook_path") or self.input.get("path")
        return (str(path),) if self.name in EDIT_TOOLS and path else ()

    @property
    def failed(self) -> bool:
        return self.is_error or (self.exit_code not in (None, 0))


@dataclass
class Message:
    role: Literal["user", "assistant"]
    text: str
    t: str = ""
    interrupt: bool = False


@dataclass
class Session:
    """One session, in order: user and assistant messages and tool calls."""

    source: Source
    path: Path
    session_id: str = ""
    cwd: str | None = None
    started: str = ""  # ISO timestamp of its first record
    commit: str | None = None  # the commit the session started from, as the transcript records it
    commit_how: str | None = None
    clean: bool | None = None  # the working tree was clean at the start (when recorded)
    branch: str | None = None
    steps: list[Call | Message] = field(default_factory=list)
    skills_used: set[str] = field(default_factory=set)
    version: str = ""

    @property
    def started_at(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.started.replace("Z", "+00:00")) if self.started else None
        except ValueError:
            return None

    @property
    def calls(self) -> list[Call]:
        return [s for s in self.steps if isinstance(s, Call)]

    @property
    def messages(self) -> list[Message]:
        return [s for s in self.steps if isinstance(s, Message)]

    def note_skill(self, call: Call) -> None:
        if call.name == "Skill" and call.input.get("skill"):
            self.skills_used.add(str(call.input["skill"]).split(":")[-1].lstrip("/"))
        for value in call.input.values():
            self.skills_used.update(_SKILL_FILE.findall(str(value)))


def exit_code_in(text: str) -> int | None:
    m = _EXIT.search(text or "")
    return int(m.group(1)) if m else None


def _records(path: Path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a session still being written
            if isinstance(rec, dict):
                yield rec


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and "text" in b)
    return ""


# ---------------------------------------------------------------- Claude Code


def read_claude(path: Path) -> Session:
    s = Session("claude-code", path)
    calls: dict[str, Call] = {}
    for rec in _records(path):
        s.session_id = s.session_id or str(rec.get("sessionId") or "")
        if rec.get("isSidechain"):
            continue
        kind = rec.get("type")
        if kind in ("user", "assistant", "attachment"):
            s.cwd = s.cwd or rec.get("cwd")
            s.started = s.started or str(rec.get("timestamp") or "")
            s.branch = s.branch or rec.get("gitBranch")
            s.version = s.version or str(rec.get("version") or "")
        if kind == "attachment":
            _claude_context(s, rec.get("attachment") or {})
        elif kind == "assistant":
            for block in (rec.get("message") or {}).get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and str(block.get("text", "")).strip():
                    s.steps.append(Message("assistant", block["text"], rec.get("timestamp", "")))
                elif block.get("type") == "tool_use":
                    call = Call(str(block.get("id", "")), str(block.get("name", "?")),
                                block.get("input") if isinstance(block.get("input"), dict) else {},
                                rec.get("timestamp", ""))
                    calls[call.id] = call
                    s.steps.append(call)
                    s.note_skill(call)
        elif kind == "user" and not rec.get("isMeta") and not rec.get("isCompactSummary"):
            _claude_user(s, rec, calls)
    return s


def _claude_user(s: Session, rec: dict, calls: dict[str, Call]) -> None:
    content = (rec.get("message") or {}).get("content")
    t = rec.get("timestamp", "")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            call = calls.get(str(block.get("tool_use_id", "")))
            if call is None:
                continue
            out = _text(block.get("content"))
            call.output, call.is_error, call.answered = out, bool(block.get("is_error")), True
            if call.command is not None:
                code = exit_code_in(out) if call.is_error else 0
                call.exit_code = code if code is not None else (1 if call.is_error else 0)
            result = rec.get("toolUseResult")
            if isinstance(result, dict) and result.get("interrupted"):
                s.steps.append(Message("user", INTERRUPT_MARK + "]", t, interrupt=True))
        elif block.get("type") == "text":
            text = str(block.get("text", ""))
            if not text.strip() or text.lstrip().startswith(("<command-", "<local-command", "<system-reminder>")):
                continue
            s.steps.append(Message("user", text, t, interrupt=text.startswith(INTERRUPT_MARK)))


def _claude_context(s: Session, att: dict) -> None:
    status = ((att.get("context") or {}).get("gitStatus") if att.get("type") == "session_context" else None)
    if not isinstance(status, str):
        return
    if "Status:\n" in status:
        s.clean = status.split("Status:\n", 1)[1].lstrip().startswith("(clean)")
    if "Recent commits:\n" in status and s.commit is None:
        first = status.split("Recent commits:\n", 1)[1].strip().split(maxsplit=1)
        if first and re.fullmatch(r"[0-9a-f]{7,40}", first[0]):
            s.commit, s.commit_how = first[0], "the git status Claude Code recorded at the start"


# ---------------------------------------------------------------- Codex


def read_codex(path: Path) -> Session:
    s = Session("codex", path)
    calls: dict[str, Call] = {}
    for rec in _records(path):
        kind, p = rec.get("type"), rec.get("payload") or {}
        if "payload" not in rec:  # releases before the `{type, payload}` envelope wrote bare records
            kind, p = ("session_meta", rec) if kind is None and "id" in rec else ("response_item", rec)
        if not isinstance(p, dict):
            continue
        t = str(rec.get("timestamp") or "")
        if kind == "session_meta":
            s.session_id = s.session_id or str(p.get("id") or p.get("session_id") or "")
            s.cwd, s.started = s.cwd or p.get("cwd"), s.started or str(p.get("timestamp") or t)
            s.version = s.version or str(p.get("cli_version") or "")
            git = p.get("git") or {}
            if git.get("commit_hash") and s.commit is None:
                s.commit, s.commit_how = str(git["commit_hash"]), "the git commit Codex recorded at the start"
                s.branch = git.get("branch")
        elif kind == "response_item":
            _codex_item(s, p, t, calls)
        elif kind == "event_msg":
            _codex_event(s, p, t, calls)
    return s


def _codex_item(s: Session, p: dict, t: str, calls: dict[str, Call]) -> None:
    ptype = p.get("type")
    if ptype == "message" and p.get("role") in ("user", "assistant"):
        text = _text(p.get("content"))
        if not text.strip():
            return
        if p["role"] == "user" and text.lstrip().startswith("<turn_aborted>"):
            s.steps.append(Message("user", text, t, interrupt=True))
        elif p["role"] == "assistant" or not text.lstrip().startswith(_CODEX_CONTEXT):
            s.steps.append(Message(p["role"], text, t))
    elif ptype in ("function_call", "custom_tool_call", "local_shell_call"):
        raw = p.get("arguments") if ptype == "function_call" else p.get("input") or p.get("action")
        try:
            args = json.loads(raw) if isinstance(raw, str) and ptype == "function_call" else raw
        except json.JSONDecodeError:
            args = {"raw": raw}
        if not isinstance(args, dict):
            args = {"input": args}
        name = str(p.get("name") or ("local_shell" if ptype == "local_shell_call" else "?"))
        call = Call(str(p.get("call_id") or p.get("id") or ""), name, args, t)
        calls[call.id] = call
        s.steps.append(call)
        s.note_skill(call)
    elif ptype in ("function_call_output", "custom_tool_call_output"):
        call = calls.get(str(p.get("call_id") or ""))
        if call is None:
            return
        out = p.get("output")
        if isinstance(out, dict):
            out = out.get("content") or out.get("output") or json.dumps(out)
        out = str(out or "")
        try:  # older releases: {"output": ..., "metadata": {"exit_code": N}}
            data = json.loads(out)
            if isinstance(data, dict) and "output" in data:
                out = str(data["output"])
                code = (data.get("metadata") or {}).get("exit_code")
                call.exit_code = int(code) if code is not None else call.exit_code
        except (json.JSONDecodeError, TypeError, ValueError):
            pass
        header = ""
        if out.startswith("Chunk ID:") and "\nOutput:\n" in out:  # exec_command's header, then the output
            header, out = out.split("\nOutput:\n", 1)
            call.exit_code = exit_code_in(header) if call.exit_code is None else call.exit_code
        call.output, call.answered = out, True
        running = _RUNNING.search(header)
        started = calls.get(f"exec-session:{call.input.get('session_id')}") if call.name == "write_stdin" else None
        if started is not None and started.running:  # a poll: its output and its end are the started command's
            _poll(started, out, call.exit_code, running)
            call.exit_code = None  # the poll itself neither passed nor failed (else a failing run counts twice)
        elif running and call.name != "write_stdin":  # no verdict until a poll sees it end
            call.running = running.group(1)
            calls[f"exec-session:{call.running}"] = call
        elif call.exit_code is None and not running:
            call.exit_code = exit_code_in(out)
        call.is_error = call.failed


def _poll(started: Call, out: str, code: int | None, running: re.Match | None) -> None:
    started.output += out
    if not running and code is not None:
        started.exit_code, started.running = code, ""
        started.is_error = started.failed


def _codex_event(s: Session, p: dict, t: str, calls: dict[str, Call]) -> None:
    ptype = p.get("type")
    if ptype == "turn_aborted":
        s.steps.append(Message("user", "[turn aborted by the user]", t, interrupt=True))
    elif ptype == "item_completed" and (p.get("item") or {}).get("type") == "CommandExecution":
        item = p["item"]
        call = calls.get(str(item.get("id") or ""))
        if call is not None and item.get("exit_code") is not None and not call.running:  # -1: killed unfinished
            call.exit_code = int(item["exit_code"])
            call.is_error = call.failed
    elif ptype == "exec_command_end":  # older releases
        call = calls.get(str(p.get("call_id") or ""))
        if call is not None and p.get("exit_code") is not None:
            call.exit_code = int(p["exit_code"])
            call.is_error = call.failed


READERS = {"claude-code": read_claude, "codex": read_codex}


def session_files(source: Source, root: Path) -> list[Path]:
    """The transcript files under `root`: a `projects` folder (Claude Code), a `sessions` folder
    (Codex), the home folder holding either, or any folder of `.jsonl` files."""
    root = Path(root)
    if root.is_file():
        return [root]
    pattern = "rollout-*.jsonl" if source == "codex" else "*.jsonl"
    for sub in (("sessions",) if source == "codex" else ("projects",)):
        if (root / sub).is_dir():
            root = root / sub
    files = sorted(p for p in root.rglob(pattern) if p.is_file())
    if source == "claude-code":  # subagent transcripts live in <session>/subagents/: not sessions
        files = [p for p in files if "subagents" not in p.parts]
    return files
