"""The validation gate: a sequential paired sign test of a candidate against the incumbent.

Each observation is one pair: the incumbent's and the candidate's score on the same validation
task (and trial). Pairs where both score the same are ties and carry no evidence; the others are
*discordant*, and each one the candidate either wins or loses. If the candidate is no better than
the incumbent, every discordant pair is a fair coin: for a deterministic target because the task
sample is random, for a sampled target because both skills are drawn afresh inside the decision
(nothing is compared with a score frozen at a lucky draw). That makes the test exact, whatever
the tasks' difficulty: McNemar's test in its exact (sign-test) form, run sequentially.

Boundaries (Haybittle-Peto group-sequential design; Haybittle 1971, Peto et al. 1976):
- interim accept: while pairs are still coming, accept as soon as the one-sided binomial p-value of
  the wins so far is at most `interim_alpha` (strict, so that early acceptance is rare but clear);
- final accept: once every planned pair is in, accept when the p-value is at most a final level,
  computed exactly by dynamic programming over fair-coin paths so that the chance of accepting a
  candidate that is no better, interim looks included, is at most `alpha` for every possible
  number of discordant pairs (and so overall);
- futility (reject early, which never raises the false-accept rate): stop when acceptance is out
  of reach even if every remaining pair were a win (curtailment), or when the conditional power,
  the chance of still accepting if the remaining pairs improved by `min_effect` per pair, falls
  below `futility`.

A skipped pair (an errored rollout on either side) is simply not observed: it is never a win or
a loss. `GateDecision` records the statistic, every pair in order and why the test stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import comb

from skillopt.optimizer.types import GateDecision, GatePair, TaskComparison

EPS = 1e-9


def tail(k: int, w: int) -> float:
    """P(Bin(k, 1/2) >= w): the one-sided p-value of `w` wins in `k` discordant pairs."""
    if w <= 0:
        return 1.0
    if w > k:
        return 0.0
    return sum(comb(k, j) for j in range(w, k + 1)) / 2 ** k


@lru_cache(maxsize=None)
def interim_bound(k: int, interim_alpha: float) -> int:
    """Fewest wins out of `k` discordant pairs that accept at an interim look (k + 1: none do)."""
    for w in range(k + 1):
        if tail(k, w) <= interim_alpha + 1e-15:
            return w
    return k + 1


@lru_cache(maxsize=None)
def final_bound(k: int, alpha: float, interim_alpha: float) -> int:
    """Fewest wins out of `k` discordant pairs that accept at the final look, such that the
    probability of fair coins crossing the interim bound at any of the k looks, or ending at or
    above this bound, is at most `alpha` (exact)."""
    crossed, alive = 0.0, {0: 1.0}  # alive: wins -> probability of paths that never crossed
    for j in range(1, k + 1):
        nxt: dict[int, float] = {}
        for w, p in alive.items():
            for w2 in (w, w + 1):
                nxt[w2] = nxt.get(w2, 0.0) + p / 2
        bound = interim_bound(j, interim_alpha)
        crossed += sum(p for w, p in nxt.items() if w >= bound)
        alive = {w: p for w, p in nxt.items() if w < bound}
    for w in range(k + 2):  # smallest final bound that keeps the total within alpha
        if crossed + sum(p for v, p in alive.items() if v >= w) <= alpha + 1e-12:
            return w
    return k + 1


@dataclass(frozen=True)
class SignTest:
    """The test's settings (see the module docstring). `planned`: pairs the gate may look at."""

    planned: int
    alpha: float = 0.05
    interim_alpha: float = 0.005
    min_effect: float = 0.1
    futility: float = 0.05
    futility_after: float = 0.25  # share of planned pairs seen before the conditional-power rule applies
    curtail: bool = True  # stop once acceptance is out of reach (False: every planned pair is seen)

    def accepts(self, wins: int, losses: int, final: bool) -> bool:
        k = wins + losses
        if wins <= losses:
            return False
        if final:
            return wins >= final_bound(k, self.alpha, self.interim_alpha)
        return wins >= interim_bound(k, self.interim_alpha)

    def reachable(self, wins: int, losses: int, remaining: int) -> bool:
        """Could any continuation accept? (Best case: every remaining pair is a win.)"""
        for j in range(remaining + 1):
            if self.accepts(wins + j, losses, final=(j == remaining)):
                return True
        return False

    def conditional_power(self, wins: int, losses: int, seen: int, remaining: int) -> float:
        """The chance of accepting at the final look if each remaining pair is a win with probability
        (d + e) / 2 and a loss with (d - e) / 2, where e = `min_effect` and d the share of pairs
        that were discordant so far (at least e): an improvement of `min_effect` per pair. (Interim
        acceptance is left out, so this errs low: a futility stop is never made on a path that
        could only be accepted at an interim look before the final one would also accept it.)"""
        e = self.min_effect
        d = min(1.0, max(e, (wins + losses) / max(1, seen)))
        return _final_power(wins, losses, remaining, round((d + e) / 2, 6), round((d - e) / 2, 6),
                            self.alpha, self.interim_alpha)


@lru_cache(maxsize=65536)
def _final_power(wins: int, losses: int, remaining: int, p_win: float, p_loss: float, alpha: float,
                 interim_alpha: float) -> float:
    p_tie = max(0.0, 1.0 - p_win - p_loss)
    total = 0.0
    for a in range(remaining + 1):  # a more wins, b more losses, the rest ties
        pa = comb(remaining, a) * p_win ** a
        for b in range(remaining - a + 1):
            w, l = wins + a, losses + b
            if w > l and w >= final_bound(w + l, alpha, interim_alpha):
                total += pa * comb(remaining - a, b) * p_loss ** b * p_tie ** (remaining - a - b)
    return total


@dataclass
class SequentialGate:
    """Feed pairs with `add`; `decision()` is None until the test stops. Implements the Gate seam.

    `planned` pairs at most; `close()` ends the test early when no more pairs will come (the rest
    errored), deciding on what was seen as if it were the final look.
    """

    test: SignTest
    metric: str = "hard"
    pairs: list[GatePair] = field(default_factory=list)
    skipped: int = 0
    _decision: tuple[bool, str, str] | None = None

    @property
    def wins(self) -> int:
        return sum(p.candidate > p.incumbent + EPS for p in self.pairs)

    @property
    def losses(self) -> int:
        return sum(p.candidate < p.incumbent - EPS for p in self.pairs)

    @property
    def remaining(self) -> int:
        return max(0, self.test.planned - len(self.pairs) - self.skipped)

    def add(self, task_id: str, incumbent: float, candidate: float, trial: int = 0) -> None:
        if self._decision is not None:
            return  # pairs still in flight when the test stopped are not evidence
        self.pairs.append(GatePair(task_id=task_id, trial=trial, incumbent=incumbent, candidate=candidate))
        self._update()

    def skip(self, task_id: str) -> None:
        """A pair that will never be observed (a rollout errored on either side after retries)."""
        if self._decision is None:
            self.skipped += 1
            self._update()

    def close(self) -> None:
        if self._decision is None:
            self._update(final=True)

    def decision(self) -> tuple[bool, str, str] | None:
        """(accepted, stop, reason) once the test has stopped, else None."""
        return self._decision

    def _update(self, final: bool = False) -> None:
        t, w, l = self.test, self.wins, self.losses
        final = final or self.remaining == 0
        k = w + l
        if t.accepts(w, l, final):
            stop = "accept-final" if final else "accept-early"
            bound = final_bound(k, t.alpha, t.interim_alpha) if final else interim_bound(k, t.interim_alpha)
            self._decision = (True, stop, f"{w} wins, {l} losses: p = {tail(k, w):.4f}, "
                                          f"at or over the {'final' if final else 'interim'} bound of {bound} wins")
        elif final:
            self._decision = (False, "exhausted", f"{w} wins, {l} losses after every pair: p = {tail(k, w):.4f}, "
                                                  f"short of the final bound of {final_bound(k, t.alpha, t.interim_alpha)} wins")
        elif t.curtail and not t.reachable(w, l, self.remaining):
            self._decision = (False, "curtailed", f"{w} wins, {l} losses with {self.remaining} pairs left: "
                                                  f"cannot reach acceptance even if all were wins")
        elif len(self.pairs) >= t.futility_after * t.planned:
            cp = t.conditional_power(w, l, len(self.pairs), self.remaining)
            if cp < t.futility:
                self._decision = (False, "futile", f"{w} wins, {l} losses: conditional power {cp:.3f} < "
                                                   f"{t.futility} even if the rest improved by {t.min_effect}")

    def summary(self, candidate: int, incumbent: int) -> GateDecision:
        """The decision record (call once `decision()` is set, or after `close()`)."""
        if self._decision is None:
            self.close()
        accepted, stop, reason = self._decision  # type: ignore[misc]
        n = max(1, len(self.pairs))
        w, l = self.wins, self.losses
        return GateDecision(
            candidate=candidate, incumbent=incumbent, accepted=accepted, reason=reason, metric=self.metric,
            incumbent_score=round(sum(p.incumbent for p in self.pairs) / n, 6),
            candidate_score=round(sum(p.candidate for p in self.pairs) / n, 6),
            wins=w, losses=l, ties=len(self.pairs) - w - l, evaluated=len(self.pairs), total=self.test.planned,
            early_stopped=stop in ("accept-early", "curtailed", "futile"), stop=stop,
            test="sequential sign test on discordant pairs (exact, Haybittle-Peto bounds)",
            alpha=self.test.alpha, min_effect=self.test.min_effect, p_value=round(tail(w + l, w), 6),
            skipped=self.skipped, pairs=list(self.pairs),
            per_task=[TaskComparison(task_id=p.task_id, incumbent=p.incumbent, candidate=p.candidate)
                      for p in self.pairs],
        )
