"""`make-swe --rewrite-model`: a model turns a generated problem statement into an issue report."""

from __future__ import annotations

from skillopt.benchmarks.make_swe import model_rewriter
from skillopt.benchmarks.swe_grading import parse_instance
from skillopt.models.types import ProviderEnv
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest

STATEMENT = "The function `slugify` in text.py was changed: it drops the last character of its result."


def _inst():
    return parse_instance({"instance_id": "tiny-1.0-001", "repo": "example/tiny", "base_commit": "abc",
                           "problem_statement": STATEMENT, "test_patch": "diff", "FAIL_TO_PASS": ["t::a"],
                           "PASS_TO_PASS": ["t::b"], "version": "1.0", "package": "tiny"}, "row")


def test_a_problem_statement_is_rewritten_through_the_model():
    seen: list[str] = []

    def reply(req: FakeRequest) -> FakeReply:
        seen.append(req.last_user_text)
        return FakeReply(text="slugify output is one character short\n\n`slugify('ab c')` gives `ab-` ...")

    with FakeModelServer(reply) as srv:
        rewrite = model_rewriter(f"openai-compatible:rewriter@{srv.openai_url}", ProviderEnv())
        issue = rewrite(STATEMENT, _inst())
    assert issue.startswith("slugify output is one character short")
    (prompt,) = seen
    assert STATEMENT in prompt and "tiny (version 1.0)" in prompt and "must not" in prompt


def test_an_empty_reply_keeps_the_statement():
    with FakeModelServer(lambda req: FakeReply(text="  ")) as srv:
        rewrite = model_rewriter(f"openai-compatible:rewriter@{srv.openai_url}", ProviderEnv())
        assert rewrite(STATEMENT, _inst()) == STATEMENT
