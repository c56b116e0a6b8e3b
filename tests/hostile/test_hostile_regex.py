"""Every regular expression in the source against adversarial strings, with a time budget:
each must run in time proportional to the input (kind: regex backtracking)."""

from __future__ import annotations

import pytest
from regex_fuzz import patterns, worst

#: Seconds one pattern may take on the worst of its adversarial strings of 10,000 characters
#: (search + findall). A linear pattern takes milliseconds; a quadratic one over a second.
BUDGET_S = 0.4
N = 10_000

PATTERNS = patterns()


def test_patterns_were_found():
    assert len(PATTERNS) > 100  # the AST walk works


@pytest.mark.parametrize("where, pattern, flags, anchored", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_pattern_is_linear(where, pattern, flags, anchored):
    seconds, what = worst(pattern, flags, anchored, N)
    if seconds <= BUDGET_S:
        return
    # Over budget: a quadratic pattern or a busy machine. Time grows 16-fold from N/4 to N when
    # the pattern is quadratic and 4-fold when it is linear, whatever the machine's speed.
    quarter, _ = worst(pattern, flags, anchored, N // 4)
    seconds, what = worst(pattern, flags, anchored, N)
    assert seconds / max(quarter, 1e-3) < 8, f"{where}: {quarter:.2f} s → {seconds:.2f} s for 4× the input ({what}): {pattern!r}"
