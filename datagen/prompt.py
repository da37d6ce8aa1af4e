"""The LLMPerf prompt (section III-A), rendered for one dataset row. Training uses this function.

The template and the two per-argument description lines are LLMPerf's, word for word. Argument
positions are 0-based, as in ``clSetKernelArg``; buffer sizes are element counts of the
argument's type (``float4`` elements for a ``float4*``), as the dataset stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TEMPLATE = (
    "Predict time for the following OpenCL kernel:\n"
    "{code}\n"
    "Given input:\n"
    "{inputs}\n"
    "Given kernel are executed with global size equals cl::NDRange({global_size}), "
    "local work-group size equals cl::NDRange({local_size})"
)
BUFFER_LINE = "Argument at position {id} is {name}, which is {qualifier} buffer of type {type} with size {value}"
SCALAR_LINE = "Argument at position {id} is {name}, which is {qualifier} scalar of type {type} with value {value}"


def argument_lines(args: list[dict[str, Any]], qualifiers: dict[str, str] | None = None) -> list[str]:
    """One description line per argument, in kernel order.

    ``args`` are the dataset's argument records (name, kind, dtype, count, value); ``qualifiers``
    maps argument names to ``global``/``constant``/``local``/``private`` (buffers default to
    ``global``, locals to ``local``, scalars to ``private``)."""
    qualifiers = qualifiers or {}
    lines = []
    for i, a in enumerate(args):
        kind = a["kind"]
        default_q = {"buffer": "global", "local": "local"}.get(kind, "private")
        q = qualifiers.get(a["name"], default_q)
        if kind in ("buffer", "local"):
            lines.append(BUFFER_LINE.format(id=i, name=a["name"], qualifier=q, type=a["dtype"], value=a["count"]))
        else:
            lines.append(SCALAR_LINE.format(id=i, name=a["name"], qualifier=q, type=a["dtype"], value=a["value"]))
    return lines


def render_prompt(source: str, args: list[dict[str, Any]], gsize: Sequence[int],
                  lsize: Sequence[int] | None, qualifiers: dict[str, str] | None = None) -> str:
    return TEMPLATE.format(
        code=source.strip("\n"),
        inputs="\n".join(argument_lines(args, qualifiers)),
        global_size=", ".join(str(int(g)) for g in gsize),
        local_size=", ".join(str(int(x)) for x in lsize) if lsize else "",
    )
