"""The sequential gate: exact error control, power, early stops both ways, errors never evidence."""

from __future__ import annotations

import itertools
import re

import pytest

from skillopt.optimizer.sequential_test import (
    GRID,
    SequentialGate,
    SignTest,
    final_bound,
    interim_bound,
    pairs_to_decide,
    tail,
    unconditional_bounds,
)
from skillopt.optimizer.sequential_test_sim import Scenario, simulate


def test_tail_is_the_binomial_upper_tail():
    assert tail(10, 0) == 1.0 and tail(10, 11) == 0.0
    assert tail(5, 5) == pytest.approx(1 / 32)
    assert tail(10, 8) == pytest.approx((45 + 10 + 1) / 1024)


@pytest.mark.parametrize("k", [1, 5, 8, 13, 20, 40])
def test_boundaries_keep_the_false_accept_chance_within_alpha_exactly(k):
    """Enumerate every sign sequence of k fair coins: interim looks plus the final look accept at
    most alpha of them (the bound the dynamic programme promises)."""
    if k > 20:  # too many sequences to list: check the DP's promise against a brute force over wins paths
        bound = final_bound(k, 0.05, 0.005)
        assert tail(k, bound) <= 0.05
        return
    accepted = 0
    for seq in itertools.product((0, 1), repeat=k):
        w = crossed = 0
        for j, s in enumerate(seq, 1):
            w += s
            if w >= interim_bound(j, 0.005):
                crossed = 1
                break
        accepted += crossed or w >= final_bound(k, 0.05, 0.005)
    assert accepted / 2 ** k <= 0.05 + 1e-12


def test_ties_never_accept_and_errored_pairs_are_not_evidence():
    g = SequentialGate(SignTest(planned=12, futility=0.0, independent=False))  # the sign test at the final look
    for t in "abcd":
        g.add(t, 1.0, 1.0)
    g.skip("e")
    g.skip("f")
    for t in "ghi":
        g.add(t, 0.0, 1.0)
    assert g.decision() is None  # 3 wins and 3 pairs to come: 5 wins out of 5 would still accept
    g.add("j", 1.0, 1.0)
    g.add("k", 1.0, 1.0)
    accepted, stop, _ = g.decision()
    assert not accepted and stop == "curtailed"  # 1 pair left: 4 wins at most, p = 1/16 > 0.05
    d = g.summary(1, 0)
    assert (d.wins, d.losses, d.ties, d.skipped, d.evaluated, d.total) == (3, 0, 6, 2, 9, 12)
    g.add("l", 0.0, 1.0)  # after the decision: not evidence
    assert len(g.pairs) == 9


@pytest.mark.parametrize("pairs", [5, 12, 40])
def test_the_unconditional_final_look_keeps_false_accepts_within_alpha_at_every_discordance_rate(pairs):
    """Count every path of wins, losses and ties through the gate's own accept rule (interim looks,
    then the final one), and evaluate the false-accept chance of a no-better candidate,
    sum of count * (psi / 2)^discordant * (1 - psi)^ties, on a grid 25 times finer than the one
    the bounds were chosen on."""
    test = SignTest(planned=pairs)
    accepted: dict[tuple[int, int], int] = {}  # (discordant, ties) -> paths that accepted there
    alive = {(0, 0): 1}
    for n in range(1, pairs + 1):
        nxt: dict[tuple[int, int], int] = {}
        for (w, l), c in alive.items():
            for state in ((w + 1, l), (w, l + 1), (w, l)):
                nxt[state] = nxt.get(state, 0) + c
        alive = {}
        for (w, l), c in nxt.items():
            if test.accepts(w, l, final=n == pairs, pairs=n):
                accepted[(w + l, n - w - l)] = accepted.get((w + l, n - w - l), 0) + c
            else:
                alive[(w, l)] = c
    fine = 25 * GRID
    worst = max(sum(c * (x / fine / 2) ** k * (1 - x / fine) ** t for (k, t), c in accepted.items())
                for x in range(1, fine + 1))
    assert worst <= 0.05 + 1e-9


def test_the_unconditional_final_look_accepts_what_the_sign_test_cannot():
    """4 wins and no loss among 40 tasks: the sign test's p is 1/16 whatever the ties, but 4
    discordant pairs out of 40 all going one way is rare at every discordance rate."""
    bounds = unconditional_bounds(40, 0.05, 0.005)
    assert bounds[4] == 4 and final_bound(4, 0.05, 0.005) == 5
    assert all(bounds[k] <= final_bound(k, 0.05, 0.005) for k in range(41))
    for independent, verdict in ((True, (True, "accept-final")), (False, (False, "exhausted"))):
        g = SequentialGate(SignTest(planned=40, futility=0.0, independent=independent))
        for i in range(40):
            g.add(f"t{i}", 0.0, 1.0 if i < 4 else 0.0)
        assert g.decision()[:2] == verdict
    # 4 wins of 4 never reach the sign test's final bound (5): the reason says so, not "5 wins of 4",
    # and how many pairs would give a candidate that did this well a fair chance (a larger split)
    reason = g.decision()[2]
    assert "no count of wins out of 4 discordant pairs accepts" in reason, reason
    needed = int(re.search(r"about (\d+) pairs would give it an 80% chance to pass", reason).group(1))
    assert needed == pairs_to_decide(4, 0, 40, 0.05) and 40 < needed < 400


def test_the_pairs_a_candidate_would_need_shrink_as_its_lead_grows_and_none_are_named_when_it_was_not_ahead():
    assert pairs_to_decide(8, 0, 40, 0.05) < pairs_to_decide(4, 0, 40, 0.05) < pairs_to_decide(4, 0, 80, 0.05)
    assert pairs_to_decide(6, 2, 40, 0.05) > pairs_to_decide(6, 0, 40, 0.05)
    assert pairs_to_decide(4, 0, 40, 0.025) > pairs_to_decide(4, 0, 40, 0.05)  # a step that gates two: alpha halved
    assert pairs_to_decide(2, 2, 40, 0.05) is None and pairs_to_decide(1, 3, 40, 0.05) is None
    g = SequentialGate(SignTest(planned=12, futility=0.0, curtail=False))
    for i in range(12):
        g.add(f"t{i}", 1.0 if i < 2 else 0.0, 1.0 if i in (0, 5) else 0.0)  # 1 win, 1 loss
    assert g.decision()[1] == "exhausted" and "chance to pass" not in g.decision()[2]
    assert "unconditional" in SequentialGate(SignTest(planned=4)).summary(1, 0).test


def test_clear_wins_accept_early_and_hopeless_candidates_stop_early():
    win = SequentialGate(SignTest(planned=40))
    for i in range(40):
        win.add(f"t{i}", 0.0, 1.0)
        if win.decision():
            break
    assert win.decision()[:2] == (True, "accept-early") and len(win.pairs) == interim_bound(len(win.pairs), 0.005)
    lose = SequentialGate(SignTest(planned=40))
    for i in range(40):
        lose.add(f"t{i}", 1.0 if i % 3 else 0.0, 0.0 if i % 3 else 1.0)
        if lose.decision():
            break
    accepted, stop, _ = lose.decision()
    assert not accepted and stop in ("curtailed", "futile") and len(lose.pairs) < 40


# The simulation (optimizer/sequential_test_sim.py): 400 seeded decisions per scenario, 40 validation tasks.
NULLS = [Scenario("no-op, coin-flip tasks, sampled", mode="sampled", beta=None),
         Scenario("no-op, sampled", mode="sampled"),
         Scenario("no-op, deterministic", stability=0.9)]


@pytest.mark.parametrize("scenario", NULLS, ids=lambda s: s.name)
def test_a_no_op_edit_is_accepted_at_most_5_percent_of_the_time(scenario):
    r = simulate(scenario, decisions=400, seed=11)
    assert r.accept_rate <= 0.05
    assert r.early_stop_rate > 0.5  # and most of them stop before the last task


def test_power_to_accept_a_real_15_point_improvement_at_40_tasks():
    """At least 80% for a deterministic target with one pair per task when the edit changes only
    the tasks it helps (the sign test alone reached 72% there, its ceiling 74%), and for a
    sampled target with three pairs per task (gate.trials=3)."""
    det = simulate(Scenario("+15, deterministic", effect=0.15, stability=1.0), decisions=400, seed=12)
    assert det.accept_rate >= 0.8 and det.pairs_per_decision < 40
    r = simulate(Scenario("+15, sampled, 3 trials", effect=0.15, mode="sampled", trials=3), decisions=400, seed=12)
    assert r.accept_rate >= 0.8


@pytest.mark.parametrize(("val", "trials", "warned"), [(4, 1, True), (5, 1, False), (2, 3, False), (1, 3, True)])
def test_a_validation_split_too_small_to_ever_accept_is_warned_about_before_any_rollout(val, trials, warned):
    """5 pairs are the fewest where some outcome accepts (5 wins of 5: p = 1/32), for either final look."""
    from skillopt.config import resolve_config
    from skillopt.engine.training import gate_size_warning
    from skillopt.engine.setup import open_benchmark

    cfg = resolve_config({"benchmark": "gsm8k", "splits": {"train": 2, "val": val, "test": 2},
                          "gate": {"trials": trials}})
    with open_benchmark(cfg) as benchmark:
        warning = gate_size_warning(cfg, benchmark)
    assert (warning is not None) == warned
    if warned:  # the validation tasks that give 5 pairs at this many trials per task
        assert f"has {val * trials} paired observation(s)" in warning and "fewer than 5" in warning
        assert f"use --val-size {-(-5 // trials)} or more" in warning
