import math

import numpy as np
import pytest

from tunekit.defaults import INTERVAL_DECADES
from tunekit.probes.lr_rules import (RULES, assess, interval, minimum_div10, prepare, smooth_loglinear, steepest,
                                    tunekit_rule, valley)

LRS = np.logspace(-6, 1, 120)
X = np.log10(LRS)


def bowl_curve(centre: float = -3.0, blowup: float = -1.0) -> np.ndarray:
    """Falls as a sigmoid centred at 10**centre, then rises steeply past 10**blowup."""
    return 2.0 - 1.5 / (1 + np.exp(-(X - centre) * 3)) + np.where(X > blowup, 5 * (X - blowup) ** 2, 0.0)


def test_local_linear_smoother_is_exact_on_lines_and_has_no_lag() -> None:
    y = 3.0 - 0.7 * X
    value, slope = smooth_loglinear(X, y, 0.4)
    np.testing.assert_allclose(value, y, atol=1e-9)
    np.testing.assert_allclose(slope, -0.7, atol=1e-9)
    # A symmetric bowl keeps its minimum where it is; a causal EMA would push it right.
    bowl = (X + 2.5) ** 2
    smooth, _ = smooth_loglinear(X, bowl, 0.35)
    assert abs(X[np.argmin(smooth)] - (-2.5)) <= 0.06
    ema = np.empty_like(bowl)
    acc = 0.0
    for i, v in enumerate(bowl):
        acc = 0.9 * acc + 0.1 * v
        ema[i] = acc / (1 - 0.9 ** (i + 1))
    assert X[np.argmin(ema)] - (-2.5) > 0.3  # the lag tunekit avoids


def test_rules_on_a_clean_curve() -> None:
    c = prepare(LRS, bowl_curve())
    s = steepest(c)
    assert s is not None and abs(math.log10(s) - (-3.0)) < 0.15  # the sigmoid's centre
    m_idx = int(np.argmin(c.smooth))
    assert minimum_div10(c) == pytest.approx(LRS[m_idx] / 10)
    v = valley(c)
    # The descent runs from the first point to the minimum; the valley rule takes its middle.
    assert v is not None and abs(math.log10(v) - (X[0] + X[m_idx]) / 2) < 0.1
    a = assess(c)
    assert a.confident and a.confidence > 0.5


def test_rules_are_stable_under_noise() -> None:
    clean = prepare(LRS, bowl_curve())
    rng = np.random.default_rng(0)
    picks = {name: [] for name in RULES}
    for _ in range(20):
        c = prepare(LRS, bowl_curve() + rng.normal(0, 0.05, len(LRS)))
        for name, rule in RULES.items():
            picks[name].append(rule(c))
    for name in ("tunekit", "steepest", "min/10"):
        logs = np.log10(np.array(picks[name], dtype=float))
        assert np.std(logs) < 0.25, name  # jumps of less than a quarter decade
        assert abs(np.median(logs) - math.log10(RULES[name](clean))) < 0.2, name


def test_curve_is_cut_at_the_first_nan() -> None:
    loss = bowl_curve()
    loss[100:] = np.nan
    loss[105] = 0.1  # a finite value after the NaN must not count
    c = prepare(LRS, loss)
    assert len(c.lrs) == 100
    for rule in RULES.values():
        lr = rule(c)
        assert lr is None or (math.isfinite(lr) and lr <= LRS[99])


def test_flat_curve_is_not_trusted() -> None:
    rng = np.random.default_rng(1)
    c = prepare(LRS, 2.0 + rng.normal(0, 0.01, len(LRS)))
    a = assess(c)
    assert not a.confident
    assert a.reasons


def test_rising_curve_has_no_steepest_descent() -> None:
    c = prepare(LRS, 1.0 + 0.01 * np.arange(len(LRS)))
    assert steepest(c) is None and valley(c) is None
    a = assess(c)
    assert not a.confident and any("never falls" in r for r in a.reasons)


def test_a_curve_that_never_falls_for_its_noise_says_so_not_start_lower() -> None:
    """Heavy-tailed batches (losses 0.9, 1.7, 0.25, 0.12, 3.0, ...): what hides the descent is the noise, and
    a lower sweep would not show it; a clean flat start is still "start the sweep lower"."""
    rng = np.random.default_rng(0)
    noisy = 1.0 + 0.01 * np.arange(len(LRS)) + np.abs(rng.standard_t(1.5, len(LRS)))
    reasons = assess(prepare(LRS, noisy)).reasons
    assert any("batch-to-batch noise" in r and "batch_size" in r for r in reasons), reasons
    assert not any("start the sweep lower" in r for r in reasons)
    clean = assess(prepare(LRS, 1.0 + 0.01 * np.arange(len(LRS)))).reasons
    assert any("start the sweep lower" in r for r in clean)


def test_still_falling_at_the_end_is_flagged() -> None:
    c = prepare(LRS, 2.0 - 0.1 * X)
    assert any("end the sweep higher" in r for r in assess(c).reasons)


def test_tiny_curves_give_no_confident_answer_and_no_lr_outside_the_sweep() -> None:
    for n in (0, 1, 2, 3):
        c = prepare(LRS[:n], bowl_curve()[:n])
        assert not assess(c).confident
        if n == 0:
            continue
        picks = {name: rule(c) for name, rule in RULES.items()}
        if n == 1:  # one point locates nothing
            assert set(picks.values()) == {None}, picks
        for name, lr in picks.items():  # min/10 and the default (a divisor of a point) may sit below the start
            low = LRS[0] / 10 if name in ("min/10", "tunekit") else LRS[0]
            assert lr is None or (math.isfinite(lr) and low * (1 - 1e-9) <= lr <= LRS[n - 1]), (n, name, lr)


def test_bottom_and_leave_bracket_the_minimum() -> None:
    from tunekit.probes.lr_rules import bottom, leave_bottom, minimum

    c = prepare(LRS, bowl_curve())
    m, b, lv = minimum(c), bottom(c), leave_bottom(c)
    assert m is not None and b is not None and lv is not None
    assert lv >= m and abs(math.log10(b) - math.log10(m)) < 1.0


def test_steepest_ignores_the_first_bandwidth() -> None:
    loss = bowl_curve()
    loss[:2] -= 0.5  # a noisy drop at the very start of the sweep
    c = prepare(LRS, loss)
    s = steepest(c)
    assert s is None or s >= LRS[0] * 10 ** c.bandwidth * (1 - 1e-9)


def test_default_divides_the_minimum_by_the_family_factor() -> None:
    from tunekit.probes.lr_rules import DEFAULT_SPEC, minimum, tunekit_rule

    anchor, ks = DEFAULT_SPEC
    assert anchor == "min" and isinstance(ks, dict)
    for fam, k in ks.items():
        c = prepare(LRS, bowl_curve(), family=fam)
        assert tunekit_rule(c) == pytest.approx(minimum(c) / k)
    other = prepare(LRS, bowl_curve(), family="other")
    lo, hi = minimum(other) / max(ks.values()), minimum(other) / min(ks.values())
    assert lo * (1 - 1e-9) <= tunekit_rule(other) <= hi * (1 + 1e-9)


def test_no_descent_gives_no_default_suggestion() -> None:
    rising = np.linspace(1.0, 3.0, len(LRS))
    assert RULES["tunekit"](prepare(LRS, rising, family="adaptive")) is None


def test_blowup_is_where_the_sweep_comes_apart_even_on_a_flat_curve() -> None:
    from tunekit.probes.lr_rules import blowup

    rng = np.random.default_rng(0)
    flat = 2.0 + 0.01 * rng.standard_normal(len(X)) + np.where(X > -1.5, 3 * (X + 1.5) ** 2, 0.0)
    up = blowup(prepare(LRS, flat))
    # 10% above the minimum of 2.0: 3 (x + 1.5)^2 = 0.2 at x = -1.24, less what the smoothing spreads.
    assert up is not None and -1.6 < math.log10(up) < -1.1
    assert blowup(prepare(LRS, 2.0 - 0.1 * (X + 6))) is None  # still falling: it never came apart


def test_bracket_search_steps_past_the_lower_end_and_stops_inside() -> None:
    from tunekit.probes.lr_rules import bracket_minimum, bracket_next, bracket_polish

    assert bracket_next([-3.0, -2.5, -2.0], [0.5, 0.6, 0.7], 0.5) == -3.5  # best at the low end
    assert bracket_next([-3.0, -2.5, -2.0], [0.7, 0.6, 0.5], 0.5) == -1.5  # at the high end
    assert bracket_next([-3.0, -2.5, -2.0], [0.7, 0.5, 0.6], 0.5) is None  # bracketed
    # The parabola through a quadratic's three points is the quadratic: its vertex exactly.
    xs = [-3.0, -2.5, -2.0]
    assert bracket_minimum(xs, [(x + 2.3) ** 2 for x in xs]) == pytest.approx(-2.3)
    assert bracket_minimum(xs, [0.5, 0.6, 0.7]) == -3.0  # at an end: the end, no extrapolation
    assert bracket_minimum(xs, [math.inf, 0.5, 0.6]) == -2.5  # a diverged neighbour: no parabola
    uneven = [-3.0, -2.5, -2.25, -2.0]
    assert bracket_minimum(uneven, [(x + 2.3) ** 2 for x in uneven]) == pytest.approx(-2.3)
    assert bracket_polish(xs, [0.7, 0.5, 0.6]) == -2.25 and bracket_polish(xs, [0.6, 0.5, 0.7]) == -2.75
    assert bracket_polish(xs, [0.5, 0.6, 0.7]) is None


def test_blowup_skips_an_early_bump_the_curve_recovers_from() -> None:
    from tunekit.probes.lr_rules import blowup

    bumpy = 2.0 + 0.5 * np.exp(-((X + 5) / 0.2) ** 2) + np.where(X > -1.5, 3 * (X + 1.5) ** 2, 0.0)
    up = blowup(prepare(LRS, bumpy))
    assert up is not None and -1.6 < math.log10(up) < -1.1  # not the bump at 1e-5


def test_minimum_is_not_the_fit_sloping_off_a_late_spike() -> None:
    # Falls to a minimum at 1e-2, rises well above its start, then one spike the sweep's median-of-3 check
    # lets through: the one-sided fit at the curve's end slopes down off it, below every loss in the curve.
    loss = 2.0 - 0.3 * np.exp(-((X + 2) / 0.7) ** 2) + np.where(X > -1, 0.6 * np.minimum(X + 1, 1), 0.0)
    loss[np.argmin(np.abs(X - 0.4))] = 50.0
    c = prepare(LRS, loss, family="adaptive")
    assert int(np.argmin(c.smooth)) == len(X) - 1 and c.smooth[-1] < loss.min()  # the artefact
    for rule in (RULES["tunekit"], RULES["min/10"], steepest):
        lr = rule(c)
        assert lr is not None and lr < 0.1, rule  # not at the end of the sweep (10)
    assert abs(math.log10(RULES["tunekit"](c) * 2) - (-2)) < 0.3


def test_the_interval_spans_a_clean_valley_and_a_flat_curve_gets_none() -> None:
    """A clean valley: the interval holds the suggestion and the valley's floor (the bowl's flat bottom lies
    between its descent at 1e-3 and its blow-up at 1e-1), INTERVAL_DECADES either side. A flat, noisy
    curve: no interval, though a rule still reads a number off it; nor a non-finite or missing suggestion. A finder
    that is not confident gets one twice as wide; one whose short runs' best the blow-up capped, a top that holds it."""
    c = prepare(LRS, bowl_curve())
    s = tunekit_rule(c)
    got = interval(s)
    assert s is not None and got is not None and got[0] < s < got[1]
    assert math.log10(got[1] / got[0]) == pytest.approx(2 * INTERVAL_DECADES)
    floor = float(LRS[int(np.argmin(c.smooth))])
    assert got[0] <= floor <= got[1] * 10 ** 0.5  # the minimum, or the shipped rule's half of it, inside
    flat = prepare(LRS, 1.0 + 0.001 * np.random.default_rng(0).standard_normal(len(LRS)))
    assert tunekit_rule(flat) is not None  # the curve alone still reads a number off the noise
    assert interval(tunekit_rule(flat), curve=flat) is None
    assert interval(s, curve=c) == got  # a curve that descends keeps its interval
    wide = interval(s, curve=c, confident=False)  # a finder in doubt: twice as wide, the same centre
    assert wide is not None and math.log10(wide[1] / wide[0]) == pytest.approx(4 * INTERVAL_DECADES)
    assert math.sqrt(wide[0] * wide[1]) == pytest.approx(s)
    # Capped below the short runs' carried best: the top reaches INTERVAL_DECADES past it, the bottom stays.
    raised = interval(s, curve=c, reach=s * 10)
    assert raised == pytest.approx((got[0], s * 10 ** (1 + INTERVAL_DECADES)))
    assert interval(s, curve=c, reach=s / 10) == got  # a carried best below the suggestion changes nothing
    assert interval(None) is None and interval(math.nan) is None and interval(0.0) is None
