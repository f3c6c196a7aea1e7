"""The Skill document: YAML front matter (`name`, `description`, anything else) + a Markdown body.

A `Skill` is immutable. `render()` is canonical (name, description, then the other keys sorted;
body without leading blank lines or trailing whitespace), so `Skill.parse(s.render()) == s` and
`sha` (sha256 of the rendered document) names a version.

The body may hold protected regions that the optimizer must not edit:

    <!-- skillopt:protected -->
    End your reply with `Answer: <letter>`.
    <!-- /skillopt:protected -->

`protected_spans()` gives their offsets (markers included); `strip_markers()` removes the marker
comments (keeping what they enclose) for export.

A skill may be a folder: SKILL.md plus small supporting text files it points to (scripts, reference
notes), in `files` (relative path -> text). They are part of the version (`sha`), written beside
SKILL.md wherever the skill goes, and an edit may add, replace or delete one (`edits`). A skill read
from a single file has none, and its `sha` is what it always was.
"""

from __future__ import annotations

import hashlib
import re
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from skillopt.errors import BadInput

NAME_MAX = 64
MAX_FILES = 20  # supporting files of a folder skill
MAX_FILE_BYTES = 64_000  # each: small scripts and notes, not data
_FILE_PART_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
DESCRIPTION_MAX = 1024
CHARS_PER_TOKEN = 4  # rough estimate for English prose and Markdown with common tokenizers

OPEN_MARKER = "<!-- skillopt:protected -->"
CLOSE_MARKER = "<!-- /skillopt:protected -->"
MARKER_RE = re.compile(r"<!--\s*(/?)skillopt:protected\s*-->")

_NAME_RE = re.compile(r"[a-z0-9-]+")
_HEADING_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_FENCE_RE = re.compile(r" {0,3}(`{3,}|~{3,})")
_DELIM_RE = re.compile(r"^---[ \t]*$", re.MULTILINE)
_CLOSE_DELIM_RE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)


class Section(BaseModel):
    """A Markdown section: its heading line up to the next heading of the same or a higher level.

    Offsets index into `Skill.body`: `start` is the heading line, `content_start` the line after
    it, `end` the start of the next such heading (or the end of the body).
    """

    model_config = ConfigDict(frozen=True)

    title: str
    level: int
    start: int
    content_start: int
    end: int
    text: str

    @property
    def heading(self) -> str:
        return f"{'#' * self.level} {self.title}"


def normalize_body(body: str) -> str:
    """The canonical body: LF line ends, no leading blank lines, no trailing whitespace."""
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    return re.sub(r"\A(?:[ \t]*\n)+", "", body).rstrip()


def validate_name(name: str) -> list[str]:
    """Problems with a skill name (Agent Skills rules); empty when it is fine."""
    problems = []
    if not name:
        return ["name is empty"]
    if len(name) > NAME_MAX:
        problems.append(f"name has {len(name)} characters (at most {NAME_MAX})")
    if not _NAME_RE.fullmatch(name):
        problems.append("name may hold only lowercase letters, digits and hyphens")
    if name.startswith("-") or name.endswith("-") or "--" in name:
        problems.append("name may not start or end with a hyphen or hold '--'")
    return problems


def validate_description(text: str) -> list[str]:
    """Problems with a skill description; empty when it is fine."""
    if not text.strip():
        return ["description is empty"]
    if len(text) > DESCRIPTION_MAX:
        return [f"description has {len(text)} characters (at most {DESCRIPTION_MAX})"]
    return []


def find_sections(body: str) -> list[Section]:
    """ATX headings (`#` .. `######`) outside fenced code blocks, as nested sections."""
    heads: list[tuple[int, int, int, str]] = []  # (start, content_start, level, title)
    fence: str | None = None
    pos = 0
    for line in body.splitlines(keepends=True):
        bare = line.rstrip("\n")
        f = _FENCE_RE.match(bare)
        if fence is None and f:
            fence = f.group(1)
        elif fence is not None:
            if f and f.group(1)[0] == fence[0] and len(f.group(1)) >= len(fence) and not bare[f.end():].strip():
                fence = None
        elif h := _HEADING_RE.fullmatch(bare):
            title = re.sub(r"[ \t]+#+$", "", (h.group(2) or "")).strip()
            heads.append((pos, pos + len(line), len(h.group(1)), title))
        pos += len(line)
    out = []
    for i, (start, content_start, level, title) in enumerate(heads):
        end = next((h[0] for h in heads[i + 1:] if h[2] <= level), len(body))
        out.append(Section(title=title, level=level, start=start, content_start=content_start,
                           end=end, text=body[start:end]))
    return out


def strip_marker_comments(body: str) -> str:
    """`body` without skillopt's protected-region markers, paired or not (their content kept): a marker
    alone on its line goes with the line."""
    body = re.sub(r"^[ \t]*" + MARKER_RE.pattern + r"[ \t]*\n?", "", body, flags=re.MULTILINE)
    return MARKER_RE.sub("", body)


def find_protected(body: str) -> tuple[list[tuple[int, int]], str | None]:
    """Protected spans (markers included) and a problem when the markers do not pair up.

    An opening marker never closed protects everything after it (fail safe).
    """
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    problem = None
    for m in MARKER_RE.finditer(body):
        closing = m.group(1) == "/"
        if not closing and opened is None:
            opened = m.start()
        elif closing and opened is not None:
            spans.append((opened, m.end()))
            opened = None
        else:
            problem = problem or f"unpaired protected marker at line {body.count(chr(10), 0, m.start()) + 1}"
    if opened is not None:
        spans.append((opened, len(body)))
        problem = problem or f"protected region opened at line {body.count(chr(10), 0, opened) + 1} is never closed"
    return spans, problem


class Skill(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    body: str
    extra: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # a folder skill's supporting files: relative path -> text

    @field_validator("files")
    @classmethod
    def _safe_files(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            if problem := file_path_problem(path):
                raise ValueError(problem)
        return dict(sorted(v.items()))

    @field_validator("name", "description")
    @classmethod
    def _stripped(cls, v: str) -> str:
        return v.strip()

    @field_validator("body")
    @classmethod
    def _canonical_body(cls, v: str) -> str:
        return normalize_body(v)

    # ---- reading and writing ------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, source: str = "<skill>") -> Skill:
        """Parse a SKILL.md document; `BadInput` (one line naming `source`) when malformed."""
        text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        if (nul := text.find("\x00")) >= 0:
            raise BadInput(f"{source}: holds a NUL byte (character {nul}): a SKILL.md is text; remove it")
        first = _DELIM_RE.match(text)
        if not first:
            raise BadInput(f"{source}: a SKILL.md must start with YAML front matter (a first line '---')")
        close = _CLOSE_DELIM_RE.search(text, first.end() + 1)
        if not close:
            raise BadInput(f"{source}: front matter is not closed by a '---' line")
        meta = _load_front_matter(text[first.end():close.start()], source)
        name, desc = (_meta_text(meta.pop(k, None), k, source) for k in ("name", "description"))
        body = text[close.end():]
        _, problem = find_protected(body)
        if problem:
            raise BadInput(f"{source}: {problem}")
        return cls(name=name, description=desc, body=body, extra=meta)

    @classmethod
    def load(cls, path: str | Path) -> Skill:
        """Read a SKILL.md file, or a folder holding one and its supporting files (`read_files`)."""
        p = Path(path)
        if p.is_dir():
            skill = cls.load(p / "SKILL.md")
            files = read_files(p)
            return skill.model_copy(update={"files": files}) if files else skill
        try:
            data = p.read_bytes()
        except OSError as e:
            raise BadInput(f"cannot read skill file {p}: {e.strerror or type(e).__name__}") from e
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInput(f"{p}: not UTF-8 text (bad byte at offset {e.start})") from e
        return cls.parse(text, source=str(p))

    def render(self) -> str:
        """The canonical document: front matter (name, description, other keys sorted), body."""
        return self.document

    @cached_property
    def document(self) -> str:
        """`render()`, computed once per (immutable) skill."""
        meta = {"name": self.name, "description": self.description,
                **{k: self.extra[k] for k in sorted(self.extra)}}
        fm = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000).strip()
        return f"---\n{fm}\n---\n\n{self.body}\n" if self.body else f"---\n{fm}\n---\n"

    @cached_property
    def sha(self) -> str:
        """sha256 of the rendered document (and of each supporting file, by path, when it has any):
        computed once per skill version, not per rollout."""
        h = hashlib.sha256(self.render().encode("utf-8"))
        for path, text in self.files.items():
            h.update(f"\0{path}\0".encode() + text.encode("utf-8"))
        return h.hexdigest()

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Skill:
        """A copy without the cached document and sha (they belong to this content only)."""
        fields = {k: getattr(self, k) for k in type(self).model_fields}
        return Skill(**{**fields, **(update or {})})

    @property
    def short_sha(self) -> str:
        return self.sha[:12]

    def with_body(self, body: str) -> Skill:
        """A new skill with `body` (normalized), same front matter and supporting files."""
        return Skill(name=self.name, description=self.description, body=body, extra=dict(self.extra),
                     files=dict(self.files))

    def write_folder(self, folder: Path) -> Path:
        """Write SKILL.md (as given: strip markers first for agents) and the supporting files into
        `folder`; returns the SKILL.md path."""
        folder.mkdir(parents=True, exist_ok=True)
        for rel, text in self.files.items():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        path = folder / "SKILL.md"
        path.write_text(self.render(), encoding="utf-8")
        return path

    # ---- structure ----------------------------------------------------------------------------

    def sections(self) -> list[Section]:
        return find_sections(self.body)

    def protected_spans(self) -> list[tuple[int, int]]:
        """(start, end) offsets into `body` of each protected region, its two markers included."""
        return find_protected(self.body)[0]

    def strip_markers(self) -> Skill:
        """The skill without skillopt's marker comments (their content kept), for export."""
        return self.with_body(strip_marker_comments(self.body))

    # ---- checks -------------------------------------------------------------------------------

    def tokens(self) -> int:
        """Estimated tokens of the rendered document: characters / 4, rounded up.

        A deliberate approximation (no tokenizer dependency); good to ~20% for English Markdown.
        """
        return -(-len(self.render()) // CHARS_PER_TOKEN)

    def problems(self) -> list[str]:
        """Name and description problems (empty when the skill would be accepted by agents)."""
        return validate_name(self.name) + validate_description(self.description)


def file_path_problem(path: str) -> str | None:
    """Why `path` cannot name a supporting file (None: it can): relative, plain parts, not SKILL.md."""
    parts = path.split("/")
    if not path or path.startswith("/") or not all(_FILE_PART_RE.fullmatch(x) for x in parts):
        return (f"bad supporting file path {path!r}: a relative path of letters, digits, '_', '-' and '.' "
                "parts (no '..', no hidden files)")
    if path in ("SKILL.md", "provenance.json"):
        return f"{path} is not a supporting file name (the skill itself, or what export writes beside it)"
    return None


def read_files(folder: Path) -> dict[str, str]:
    """A skill folder's supporting files: every file under it but SKILL.md and hidden ones (and
    `provenance.json`, which export writes beside them); `BadInput` for a binary or too large
    one, or too many."""
    out: dict[str, str] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if not p.is_file() or rel in ("SKILL.md", "provenance.json") or any(x.startswith(".") for x in rel.split("/")):
            continue
        if problem := file_path_problem(rel):
            raise BadInput(f"{folder}: {problem}")
        data = p.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise BadInput(f"{p}: {len(data)} bytes, over {MAX_FILE_BYTES} for a supporting file of a skill; "
                           "keep supporting files small (scripts, notes)")
        try:
            out[rel] = data.decode("utf-8").replace("\r\n", "\n")
        except UnicodeDecodeError as e:
            raise BadInput(f"{p}: not UTF-8 text (bad byte at offset {e.start}): a skill's supporting files are text") from e
        if len(out) > MAX_FILES:
            raise BadInput(f"{folder}: more than {MAX_FILES} supporting files; a skill folder holds a few small ones")
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (plain YAML keeps the last, silently)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice",
                                                        key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load_front_matter(raw: str, source: str) -> dict[str, Any]:
    try:
        meta = yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506  (a SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at front matter line {mark.line + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise BadInput(f"{source}: invalid YAML in front matter{where}: {what}") from e
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise BadInput(f"{source}: front matter must be a YAML mapping (name: ..., description: ...)")
    return {str(k): v for k, v in meta.items()}


def _meta_text(value: Any, key: str, source: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadInput(f"{source}: front matter needs a non-empty '{key}'")
    if isinstance(value, (dict, list)):
        raise BadInput(f"{source}: front matter '{key}' must be text, not a {type(value).__name__}")
    return str(value).strip()
