"""Line rules: a log parser as a table of (cheap word test, pattern, handler) rows.

A log parser reads one line at a time and asks, in order, which rule the line belongs to; the
first rule that takes the line ends its handling. Each rule first looks for a plain word in the
line (a substring test is much cheaper than a pattern, and most lines of a log match no rule),
then searches its pattern, then calls its handler with the parser's state and the match.

>>> import re
>>> seen = []
>>> rules = (Rule(re.compile(r"version (\\S+)"), lambda st, m, line: st.append(m.group(1)), words=("version",)),)
>>> apply_first(rules, seen, "vLLM API server version 0.8.5"), apply_first(rules, seen, "other"), seen
(True, False, ['0.8.5'])
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One line rule.

    ``words``: the line must contain one of them (start with one, when ``prefix``); none: no
    test. ``need``: a word the line must also contain. ``pattern``: searched in the line; the
    rule takes the line on a match, or whenever the words are there when ``always`` is set or
    there is no pattern. ``handle(state, match, line)`` then runs (``match`` is None when the
    pattern did not match or there is none).
    """

    pattern: re.Pattern[str] | None
    handle: Callable[[Any, re.Match[str] | None, str], None]
    words: tuple[str, ...] = ()
    need: str = ""
    prefix: bool = False
    always: bool = False


def apply_first(rules: Sequence[Rule], state: Any, line: str) -> bool:
    """Run the handler of the first rule of ``rules`` that takes ``line``; False when none does.

    (One loop without calls until a rule's words are found: this runs for every line of logs of
    hundreds of megabytes.)
    """
    for rule in rules:
        words = rule.words
        if words:
            if rule.prefix:
                if not line.startswith(words):
                    continue
            else:
                for w in words:
                    if w in line:
                        break
                else:
                    continue
        if rule.need and rule.need not in line:
            continue
        m = rule.pattern.search(line) if rule.pattern is not None else None
        if m is not None or rule.pattern is None or rule.always:
            rule.handle(state, m, line)
            return True
    return False
