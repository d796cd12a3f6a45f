"""Regular expressions that come from outside (a schema's ``pattern``, a ``regex``
criterion) run on RE2, whose time is linear in the text.

Python's ``re`` backtracks: ``^(a+)+$`` against 30 a's and a "!" took 35 s, holding the
GIL, and the whole server (every request, the embedded worker) stood still meanwhile; a
run's timeout cannot interrupt it. RE2 has no lookaround and no backreferences, the two
things that make a pattern need backtracking: such a pattern is refused when it is given
(a skill, a packet, a criterion), saying so, rather than run.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2


class PatternError(ValueError):
    """A pattern RE2 cannot run (not a regex, or lookaround and backreferences)."""


@lru_cache(maxsize=512)
def compiled(pattern: str, *, ignore_case: bool = False) -> Any:
    """The RE2 program of ``pattern``; raises :class:`PatternError` saying why not."""
    options = re2.Options()
    options.log_errors = False   # it wrote each refusal to the server's stderr
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{reason} (patterns run without lookaround or backreferences, which "
                           f"can take exponential time)") from None


def search(pattern: str, text: str, *, ignore_case: bool = False) -> str | None:
    """The first match of ``pattern`` in ``text`` (its text), or None."""
    found = compiled(pattern, ignore_case=ignore_case).search(text)
    return None if found is None else str(found.group(0))
