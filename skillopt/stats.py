"""Statistics for comparing skills: confidence intervals, paired outcomes, significance tests.

Pure functions over plain numbers, each checkable by hand:

- `wilson_interval`: 95% CI of a proportion (hard 0/1 scores).
- `t_interval`: 95% CI of a mean with Student's t (soft scores), clipped to [0, 1].
- `paired_outcomes`: per-task wins / losses / ties of B against A (per-task means over trials).
- `mcnemar_exact`: exact (binomial) McNemar test on the discordant pairs of 0/1 outcomes.
- `paired_bootstrap`: seeded, deterministic paired bootstrap of the mean per-task difference
  (when every difference is the same, the bootstrap has no spread to resample and the exact
  sign-flip p-value 2^(1-n) is reported instead, named as such).
- `paired_test`: McNemar when every per-task value is 0 or 1, else the paired bootstrap; it
  says which one it used.
- `paired_difference_interval` / `paired_lift`: THE paired comparison every view shows (the run's
  summary, `compare`, the report, the API): the mean per-task difference B - A with its 95%
  interval (Agresti-Min on 0/1 outcomes, Student t otherwise) and the verdict read off it.

Every interval treats rollouts as independent draws (with several trials per task this is an
approximation: trials of one task are correlated). Paired tests work on per-task means, so
trials never count as extra tasks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal
EPS = 1e-9  # the one tolerance for comparing scores: a difference within it is a tie

TestName = Literal["mcnemar-exact", "paired-bootstrap", "sign-flip-exact", "none"]


class Interval(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    lo: float
    hi: float
    n: int
    method: Literal["wilson", "t", "agresti-min", "none"]


class Outcomes(BaseModel):
    """Per-task comparison of B against A on the tasks both have."""

    model_config = ConfigDict(frozen=True)

    wins: int
    losses: int
    ties: int
    n: int
    delta: float  # mean over common tasks of (B - A)


class TestResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    test: TestName
    p_value: float | None
    delta: float
    delta_lo: float | None = None  # bootstrap CI of delta (paired bootstrap only)
    delta_hi: float | None = None
    n: int = 0


# intervals ---------------------------------------------------------------------------------------
def wilson_interval(successes: float, n: int, z: float = Z95) -> Interval:
    """Wilson score interval of a proportion: `successes` out of `n` (n=0 gives [0, 1])."""
    if n <= 0:
        return Interval(mean=0.0, lo=0.0, hi=1.0, n=0, method="none")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return Interval(mean=p, lo=max(0.0, center - half), hi=min(1.0, center + half), n=n, method="wilson")


def t_interval(values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """Student-t interval of the mean, clipped to `bounds`; fewer than 2 values give the full range."""
    n = len(values)
    if n == 0:
        return Interval(mean=0.0, lo=bounds[0], hi=bounds[1], n=0, method="none")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean=mean, lo=bounds[0], hi=bounds[1], n=1, method="none")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_critical(n - 1, level) * sd / math.sqrt(n)
    return Interval(mean=mean, lo=max(bounds[0], mean - half), hi=min(bounds[1], mean + half), n=n, method="t")


def score_interval(values: Sequence[float]) -> Interval:
    """Wilson when every value is 0 or 1 (hard scores), else the t interval (soft scores)."""
    if all(v in (0.0, 1.0) for v in values):
        return wilson_interval(sum(values), len(values))
    return t_interval(values)


def t_two_sided_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer `df` (Abramowitz & Stegun 26.7.3 / 26.7.4)."""
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        total, term = 0.0, c
        if df > 1:
            total = term
            for k in range(3, df - 1, 2):  # cos + (2/3) cos^3 + (2*4)/(3*5) cos^5 + ...
                term *= (k - 1) / k * c * c
                total += term
        return 2 / math.pi * (theta + s * total)
    total, term = 1.0, 1.0
    for k in range(2, df - 1, 2):  # 1 + (1/2) cos^2 + (1*3)/(2*4) cos^4 + ...
        term *= (k - 1) / k * c * c
        total += term
    return s * total


def t_critical(df: int, level: float = 0.95) -> float:
    """The two-sided critical value t with P(|T| <= t) = level, by bisection."""
    if df < 1:
        raise ValueError("df must be at least 1")
    if df > 200 and abs(level - 0.95) < 1e-12:  # Cornish-Fisher expansion: exact to ~1e-6 here
        z = Z95
        return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
    lo, hi = 0.0, 1.0
    while t_two_sided_mass(hi, df) < level:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_mass(mid, df) < level:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


# paired comparisons --------------------------------------------------------------------------------
def outcome(a: float, b: float, eps: float = EPS) -> Literal["win", "loss", "tie"]:
    """B against A on one task: the one win / loss rule (a difference within `eps` is a tie)."""
    return "win" if b > a + eps else "loss" if b < a - eps else "tie"


def count_outcomes(pairs: Iterable[tuple[float, float]], eps: float = EPS) -> Outcomes:
    """Wins / losses / ties of B against A over (a, b) pairs (by `outcome`)."""
    pairs = list(pairs)
    kinds = [outcome(a, b, eps) for a, b in pairs]
    wins, losses = kinds.count("win"), kinds.count("loss")
    delta = sum(b - a for a, b in pairs) / len(pairs) if pairs else 0.0
    return Outcomes(wins=wins, losses=losses, ties=len(pairs) - wins - losses, n=len(pairs), delta=delta)


def paired_outcomes(a: Mapping[str, float], b: Mapping[str, float], eps: float = EPS) -> Outcomes:
    """Wins / losses / ties of B against A on the tasks both have (values: per-task means)."""
    return count_outcomes(((a[t], b[t]) for t in a if t in b), eps)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (A right, B wrong) and c.

    Under the null each discordant pair goes either way with probability 1/2, so
    p = min(1, 2 * P(X <= min(b, c))) with X ~ Binomial(b + c, 1/2).
    """
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 10000, seed: int = 0,
                     level: float = 0.95) -> TestResult:
    """Paired bootstrap of the mean difference d = b - a (seeded: the same inputs give the same p).

    p is two-sided against the null of no difference: the share of resampled means, shifted to
    mean zero, at least as far from zero as the observed mean, counted as (1 + k) / (1 + n_boot).
    The interval is the percentile interval of the resampled means.
    """
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    n = len(a)
    if n == 0:
        return TestResult(test="paired-bootstrap", p_value=None, delta=0.0, n=0)
    d = [y - x for x, y in zip(a, b)]
    obs = sum(d) / n
    if all(abs(x - d[0]) <= EPS for x in d):
        # No spread: every resample equals the observed mean, so the bootstrap cannot judge it.
        # The exact sign-flip test can: all n differences share one sign with probability 2^(1-n).
        p = 1.0 if abs(obs) <= EPS else min(1.0, 2.0 ** (1 - n))
        return TestResult(test="sign-flip-exact", p_value=p, delta=obs, delta_lo=obs, delta_hi=obs, n=n)
    rng = random.Random(seed)
    means = []
    extreme = 0
    for _ in range(n_boot):
        m = sum(rng.choices(d, k=n)) / n
        means.append(m)
        if abs(m - obs) >= abs(obs) - EPS:
            extreme += 1
    means.sort()
    alpha = (1 - level) / 2
    lo = means[math.floor(alpha * (n_boot - 1))]
    hi = means[math.ceil((1 - alpha) * (n_boot - 1))]
    p = 1.0 if abs(obs) <= EPS else (1 + extreme) / (1 + n_boot)
    return TestResult(test="paired-bootstrap", p_value=min(1.0, p), delta=obs, delta_lo=lo, delta_hi=hi, n=n)


def paired_test(a: Mapping[str, float], b: Mapping[str, float], metric: str = "hard", n_boot: int = 10000,
                seed: int = 0) -> TestResult:
    """Significance of B against A on their common tasks (values: per-task means).

    Hard scores: McNemar's exact test when every value is 0 or 1 (one trial per task), else the
    paired bootstrap (hard scores averaged over several trials). Soft scores: the paired bootstrap.
    """
    common = [t for t in a if t in b]
    if not common:
        return TestResult(test="none", p_value=None, delta=0.0, n=0)
    xs, ys = [a[t] for t in common], [b[t] for t in common]
    if metric == "hard" and all(v in (0.0, 1.0) for v in xs + ys):
        c = sum(x == 0.0 and y == 1.0 for x, y in zip(xs, ys))  # B right, A wrong
        bb = sum(x == 1.0 and y == 0.0 for x, y in zip(xs, ys))  # A right, B wrong
        return TestResult(test="mcnemar-exact", p_value=mcnemar_exact(bb, c),
                          delta=(sum(ys) - sum(xs)) / len(common), n=len(common))
    return paired_bootstrap(xs, ys, n_boot=n_boot, seed=seed)


def paired_difference_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Interval of the mean paired difference b - a (per task, same tasks in the same order).

    0/1 values: the Agresti-Min interval for matched proportions (Agresti and Min 2005): half a
    count is added to each cell of the 2x2 table, then the Wald interval of the difference. It
    keeps close to nominal coverage at small n and stays sensible with no discordant pair at all,
    where Wald collapses to a point. Other values: Student's t over the differences, clipped to [-1, 1].
    """
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    n = len(a)
    if n == 0:
        return Interval(mean=0.0, lo=-1.0, hi=1.0, n=0, method="none")
    if not all(v in (0.0, 1.0) for v in list(a) + list(b)):
        return t_interval([y - x for x, y in zip(a, b)], level, bounds=(-1.0, 1.0))
    only_b = sum(x == 0.0 and y == 1.0 for x, y in zip(a, b)) + 0.5
    only_a = sum(x == 1.0 and y == 0.0 for x, y in zip(a, b)) + 0.5
    m = n + 2.0
    d = (only_b - only_a) / m
    se = math.sqrt(max(0.0, (only_b + only_a) - (only_b - only_a) ** 2 / m)) / m
    half = _z(level) * se
    return Interval(mean=sum(y - x for x, y in zip(a, b)) / n, lo=max(-1.0, d - half), hi=min(1.0, d + half), n=n,
                    method="agresti-min")


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


# the paired lift: "is B better than A on the same tasks" ------------------------------------------------
Verdict = Literal["better", "worse", "no significant difference"]


class PairedLift(BaseModel):
    """B - A on the tasks both have (per-task means over trials): the one paired comparison that the
    run's summary, `compare`, the report and the API show, with the same n, interval and words.

    The interval is `paired_difference_interval` (Agresti-Min for 0/1 outcomes, Student's t over the
    differences otherwise); the verdict is read off it: better when it lies above 0, worse below."""

    model_config = ConfigDict(frozen=True)

    interval: Interval  # of the mean per-task difference B - A
    wins: int  # tasks where B beats A
    losses: int
    ties: int

    @computed_field  # type: ignore[prop-decorator]  # pydantic's form; mypy rejects a decorated property
    @property
    def n(self) -> int:
        return self.interval.n

    @property
    def delta(self) -> float:
        return self.interval.mean

    @computed_field  # type: ignore[prop-decorator]  # pydantic's form; mypy rejects a decorated property
    @property
    def verdict(self) -> Verdict:
        i = self.interval
        if i.n and i.lo > 0:
            return "better"
        if i.n and i.hi < 0:
            return "worse"
        return "no significant difference"

    def ci_text(self) -> str:
        i = self.interval
        return f"{i.mean:+.3f} (95% CI {i.lo:+.3f} to {i.hi:+.3f}, paired {i.method}, n={i.n})"

    def text(self) -> str:
        """`+1.000 (95% CI +0.168 to +1.000, paired agresti-min, n=4; 4 won, 0 lost, 0 tied): better`"""
        i = self.interval
        return (f"{i.mean:+.3f} (95% CI {i.lo:+.3f} to {i.hi:+.3f}, paired {i.method}, n={i.n}; "
                f"{self.wins} won, {self.losses} lost, {self.ties} tied): {self.verdict}")


def paired_lift(a: Mapping[str, float], b: Mapping[str, float], level: float = 0.95) -> PairedLift | None:
    """B against A on their common tasks (values: per-task means); None when they share no task."""
    common = sorted(t for t in a if t in b)
    if not common:
        return None
    xs, ys = [a[t] for t in common], [b[t] for t in common]
    out = paired_outcomes(dict(zip(common, xs)), dict(zip(common, ys)))
    return PairedLift(interval=paired_difference_interval(xs, ys, level), wins=out.wins, losses=out.losses,
                      ties=out.ties)
