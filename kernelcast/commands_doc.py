"""``docs/commands.md`` from the command line's own parsers: one section per command with its
options (value, default, help), and the renamed options that still work.

``python -m kernelcast.commands_doc`` writes the page; ``--check`` exits 1 when the page is not current
(a test runs that check, so the page follows every change of a flag)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelcast.cli import build_parser
from kernelcast.options import RenamedOption

#: the page, relative to the repository root
PAGE = Path(__file__).resolve().parents[1] / "docs" / "commands.md"

HEADER = """# Commands

Every command of `kernelcast`, with its options. This page is generated from the command line's
parsers (`python -m kernelcast.commands_doc`; a test checks that it is current), so it says exactly what
`kernelcast COMMAND --help` says.

Conventions shared by every command:

- `--quiet`: no progress output on stderr (every command that shows progress has it);
- `--json`: the same content as the printed table, as JSON;
- `--device`: auto (default, or the `KERNELCAST_DEVICE` environment variable), an OpenCL `P:D`,
  `cuda:N`, or part of the device's name;
- `--repeats N`: the minimum timed launches of each configuration; `--rounds N`: measure in N rounds
  and pool them (`--sweep-rounds`, `--sample-rounds`: the rounds of one kind of configuration);
- `--kernel FILE`: a kernel source file, OpenCL C (`.cl`) or CUDA (`.cu`);
- `--build-options OPTIONS`: the kernel's build options; a value starting with a dash is taken as
  it is (`--build-options -DBLOCK=256` and `--build-options '-DTILE=16 -DBLOCK=256'` both work);
- bad input (a malformed option, a missing file) ends with one line on stderr and exit status 2,
  before any work.
"""


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(command words, one-line help, parser) of every runnable command, in the order of ``--help``."""
    out: list[tuple[str, str, argparse.ArgumentParser]] = []

    def walk(p: argparse.ArgumentParser, path: list[str], help_line: str) -> None:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if path and not subs:
            out.append((" ".join(path), help_line, p))
        for a in subs:
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            for name, sp in a.choices.items():
                walk(sp, path + [name], helps.get(name, ""))

    walk(parser, [], "")
    return out


def _cell(text: str) -> str:
    return " ".join(text.replace("%%", "%").replace("|", "\\|").split())


def _value(a: argparse.Action) -> str:
    if a.nargs == 0:
        return ""
    if a.metavar:
        return str(a.metavar)
    if a.choices:
        return "{" + ",".join(map(str, a.choices)) + "}"
    return a.dest.upper()


def _default(a: argparse.Action) -> str:
    if a.nargs == 0 or a.default in (None, "", [], argparse.SUPPRESS) or a.required:
        return ""
    return f"`{a.default}`"


def _section(words: str, help_line: str, p: argparse.ArgumentParser) -> list[str]:
    lines = [f"## kernelcast {words}", ""]
    if help_line:
        lines += [_cell(help_line)[:1].upper() + _cell(help_line)[1:] + ".", ""]
    if p.description:
        lines += [_cell(p.description), ""]
    pos = [a for a in p._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    opts = [a for a in p._actions if a.option_strings and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction)]
    usage = " ".join([f"kernelcast {words}"] + [str(a.metavar or a.dest) for a in pos]
                     + [f"{a.option_strings[-1]} {_value(a)}".strip() for a in opts if a.required])
    lines += ["```", usage + (" [options]" if any(not a.required for a in opts) else ""), "```", ""]
    if pos:
        lines += ["| argument | description |", "|---|---|"]
        lines += [f"| `{a.metavar or a.dest}` | {_cell(a.help or '')} |" for a in pos]
        lines.append("")
    if opts:
        lines += ["| option | value | default | description |", "|---|---|---|---|"]
        for a in opts:
            flags = ", ".join(f"`{o}`" for o in a.option_strings)
            req = "required; " if a.required else ""
            lines.append(f"| {flags} | {_cell(_value(a))} | {_default(a)} | {req}{_cell(a.help or '')} |")
        lines.append("")
    if p.epilog:
        lines += [_cell(p.epilog), ""]
    return lines


def render() -> str:
    """The page's text."""
    parser = build_parser()
    commands = _commands(parser)
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    lines += [f"| [`{w}`](#kernelcast-{w.replace(' ', '-')}) | {_cell(h)} |" for w, h, _ in commands]
    lines.append("")
    renamed: list[tuple[str, str, str]] = []
    for words, help_line, p in commands:
        lines += _section(words, help_line, p)
        renamed += [(words, o, a.new) for a in p._actions if isinstance(a, RenamedOption) for o in a.option_strings]
    if renamed:
        lines += ["## Renamed options", "",
                  "These spellings still work, print a warning naming the new one, and are left out of `--help`:", "",
                  "| command | old | new |", "|---|---|---|"]
        lines += [f"| {w} | `{o}` | `{n}` |" for w, o, n in renamed]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    text = render()
    if args == ["--check"]:
        current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
        if current != text:
            print(f"{PAGE} is not current: run python -m kernelcast.commands_doc", file=sys.stderr)
            return 1
        return 0
    if args:
        print("usage: python -m kernelcast.commands_doc [--check]", file=sys.stderr)
        return 2
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
