"""Sites: the loop and ``if`` statements of a kernel whose counts only a run on real inputs tells.

Both sides of profile-guided prediction name a site the same way: the static analysis
(:mod:`models.static`, a symbol in its count expressions) and the counting launch
(:mod:`instrument.counters`, a measured value). The name is built from the 1-based line and column
of the statement in the kernel's source file as :func:`kernelcast.clang.parse` reads it:
``trip_l{line}_c{col}`` for a loop (its mean trips per entry) and ``br_l{line}_c{col}`` for an
``if`` (the share of its evaluations that take the then-side). A loop also has
``tpeak_l{line}_c{col}``: the largest mean trips per entry of any one work-item (its busiest;
equal to ``trip_`` when every work-item runs it alike), what decides a kernel whose work is
spread unevenly over its work-items.
"""

from __future__ import annotations

TRIP_PREFIX = "trip_l"
BRANCH_PREFIX = "br_l"
PEAK_PREFIX = "tpeak_l"
SITE_PREFIXES = (TRIP_PREFIX, BRANCH_PREFIX)
#: every symbol a counting launch measures (a site's value and a loop's busiest work-item)
COUNT_PREFIXES = (TRIP_PREFIX, BRANCH_PREFIX, PEAK_PREFIX)


def site_symbol(kind: str, line: int, col: int) -> str:
    """The name of the loop (``kind`` ``loop``) or ``if`` statement (``if``) at ``line``:``col``."""
    if kind == "loop":
        return f"{TRIP_PREFIX}{line}_c{col}"
    if kind == "if":
        return f"{BRANCH_PREFIX}{line}_c{col}"
    raise ValueError(f"unknown site kind {kind!r} (loop or if)")


def peak_symbol(trip: str) -> str:
    """The busiest-work-item symbol of a loop site ``trip_l{line}_c{col}``."""
    if not trip.startswith(TRIP_PREFIX):
        raise ValueError(f"not a loop site symbol: {trip!r}")
    return PEAK_PREFIX + trip[len(TRIP_PREFIX):]
