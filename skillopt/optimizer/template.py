"""Fixed wording the optimizer may add on its own, behind one setting (`train.template`).

Everything else the optimizer writes comes from the traces it reads. A template is text written
in this code: what the teacher is asked on top of a task, the line that opens a worked example,
and the first angle of reflection. `working-first` is the chain-of-thought template that produced
every GSM8K lift measured before the development suite (perf/results/quality*.json): it tells the
target to write numbered steps before its answer. `none` keeps each of those neutral, so a lift
measured with it belongs to what the optimizer found in the traces. `learned` has the optimizer
write the reply's shape that the teacher is asked and the worked example opens with
(`optimizer/reply_shape.py`). perf/suite.py's ablation measures each.

`working-first` is wording for answers to questions: a function or a patch has no final answer to
work toward, and its reply is the code itself, so on code and repository tasks the template speaks
as `none` does (`template(name, kind)`). The MBPP run that showed it: the worked example, the
target's own function in one python block, opened with "the work first, one step per line ...,
then the final answer", which it did not do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

TemplateName = Literal["none", "working-first", "learned"]


@dataclass(frozen=True)
class Template:
    name: str
    show_work: str  # appended to a task when the teacher solves it ("" = the task alone)
    follow: str  # the line that opens a worked example
    shape_focus: str  # the first angle of reflection (the reply's shape)


WORKING_FIRST = Template(
    name="working-first",
    show_work=('Show your work first, one step per line, numbered "Step 1:", "Step 2:", ..., and only then give '
               "the final answer the task asks for."),
    follow=('Reply the way this example does: the work first, one step per line ("Step 1: ...", "Step 2: ..."), '
            "then the final answer. Never give the final answer alone."),
    shape_focus=("the exact shape of the reply: tell the agent what to write before its final answer, line by line "
                 "(for example numbered steps, 'Step 1: ...'), and that the final answer never comes alone; show "
                 "that shape in a short example with placeholders, never a task's own content."),
)

NONE = Template(
    name="none",
    show_work="",
    follow="A task of this kind and a reply that the scorer accepted.",
    shape_focus=("the shape of the reply: compare what the failed replies wrote with what the scorer expected, "
                 "and say what a reply must contain, and in what form, to be accepted."),
)


# the optimizer writes the reply's shape each step (optimizer/reply_shape.py): the teacher is asked it and
# the worked example opens with it; until it has written one, and for the reflections, the neutral wording
LEARNED = Template(name="learned", show_work=NONE.show_work, follow=NONE.follow, shape_focus=NONE.shape_focus)


def template(name: str, kind: str = "qa") -> Template:
    """The template `name` (`train.template`) for tasks of `kind` (a benchmark's `Task.kind`)."""
    chosen = {t.name: t for t in (WORKING_FIRST, NONE, LEARNED)}[name]
    if chosen is WORKING_FIRST and kind != "qa":
        return replace(NONE, name=WORKING_FIRST.name)
    return chosen
