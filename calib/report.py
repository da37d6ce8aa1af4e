"""What ``calib`` prints: a device profile as a table (library function, shared by ``calib`` and the demo)."""

from __future__ import annotations

from typing import Any

from kernelcast.calib.microbench import values_table

from kernelcast.console import fmt_table

__all__ = ["format_profile"]


def format_profile(profile: Any) -> str:
    """The table the command prints: every value with units, r^2 and source."""
    d = profile.device
    head = [f"device   {d.name} ({d.device_type}, {d.platform.split(' Linux')[0]}, driver {d.driver}), "
            f"{d.compute_units} compute units, work-group multiple {d.wg_multiple}, "
            f"max clock {d.max_clock_mhz} MHz",
            f"meter    {profile.meter}", ""]
    rows = values_table(profile)
    cols = ["value", "measured", "units", "r2", "source"]
    if any(v.runs > 1 for v in profile.values.values()):
        cols.insert(4, "spread %")
        for r in rows:
            sp = profile.values[r[0]].spread
            r.insert(4, None if sp is None else round(sp * 100, 1))
    table = fmt_table(rows, cols)
    tail = [""] + [f"note: {n}" for n in profile.notes]
    return "\n".join(head) + table + "\n" + "\n".join(tail)
