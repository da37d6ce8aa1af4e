"""Commands behave alike: every subcommand's parser is walked and the rules for flag names are checked
(one meaning and one help text per shared flag name, ``--quiet`` wherever progress is shown, one
spelling for rounds, renamed flags kept as hidden aliases that warn), and the command-line assembly
stays out of the library's imports."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

import pytest

from kernelcast.cli import build_parser
from kernelcast.options import join_dash_values

ROOT = Path(__file__).resolve().parents[1]

#: flags with one meaning everywhere: the help before its first " (" (defaults, details) is the same
SHARED = {"--help", "--quiet", "--analysis-cache", "--device", "--meter", "--kernel", "--build-options",
          "--timeout", "--repeats", "--define", "--rounds", "--sweep-rounds", "--max-rounds", "--name", "--gsize",
          "--lsize"}
#: flags whose meaning is the command's own object of that kind (its output, its input data, its
#: model, ...): one meaning, worded per command
PER_COMMAND = {"--out", "--json", "--data", "--model", "--profile", "--configs", "--arg", "--limit", "--seed",
               "--epochs", "--lr", "--batch-size", "--max-steps", "--max-minutes", "--threads", "--corpus",
               "--measured", "--counts", "--measure-counts", "--codegen-epochs", "--folds", "--max-sizes",
               "--min-time", "--configs-per-kernel", "--only", "--list"}
#: spellings replaced by another name, each kept as a hidden alias: (command, old, new, words after the
#: old flag, the value it stores)
ALIASES = [("evaluate", "--repeats", "--seeds", ["2"], 2), ("calib", "--runs", "--rounds", ["2"], 2),
           ("calib", "--no-progress", "--quiet", [], True), ("train", "--no-progress", "--quiet", [], True),
           ("pretrain", "--no-progress", "--quiet", [], True), ("tune", "--measure-rounds", "--rounds", ["2"], 2),
           ("dataset counts", "--kernel", "--kernel-id", ["abc", "--kernel", "def"], ["abc", "def"])]


def _commands() -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if path and not subs:
            out[" ".join(path)] = p
        for a in subs:
            for name, sp in a.choices.items():
                walk(sp, path + [name])

    walk(build_parser(), [])
    return out


def _visible(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings if o.startswith("--")}


def _meaning(help_text: str | None) -> str:
    return (help_text or "").split(" (")[0].strip()


COMMANDS = _commands()


def test_the_walk_sees_every_command():
    assert {"measure", "predict", "tune", "datagen", "dataset counts", "calib", "train", "evaluate", "demo",
            "bench"} <= set(COMMANDS)


def test_a_shared_flag_has_one_meaning_across_commands():
    seen: dict[str, dict[str, str]] = {}
    for cmd, p in COMMANDS.items():
        for flag, a in _visible(p).items():
            seen.setdefault(flag, {})[cmd] = _meaning(a.help)
    bad = []
    for flag, by_cmd in sorted(seen.items()):
        if len(by_cmd) < 2:
            continue
        if flag not in SHARED | PER_COMMAND:
            bad.append(f"{flag} is in {sorted(by_cmd)}: add it to SHARED (one help) or PER_COMMAND")
        elif flag in SHARED and len(set(by_cmd.values())) > 1:
            bad.append(f"{flag}: {by_cmd}")
        if any(not h for h in by_cmd.values()):
            bad.append(f"{flag} has no help in {[c for c, h in by_cmd.items() if not h]}")
    assert not bad, "\n".join(bad)


def test_every_command_that_shows_progress_has_quiet():
    bad = []
    for cmd, p in COMMANDS.items():
        func = p.get_default("func")
        if func is not None and "progress" in inspect.getsource(func) and "--quiet" not in _visible(p):
            bad.append(cmd)
    assert not bad, f"progress shown without --quiet: {bad}"
    assert {"datagen", "calib", "train", "pretrain", "blend", "evaluate", "bench", "demo", "corpus ingest"} \
        <= {c for c, p in COMMANDS.items() if "--quiet" in _visible(p)}


def test_rounds_have_one_spelling_and_old_names_are_hidden():
    for cmd, p in COMMANDS.items():
        flags = _visible(p)
        assert not {"--no-progress", "--runs", "--measure-rounds"} & set(flags), cmd
        for f in flags:
            if "round" in f:
                assert f == "--rounds" or f.endswith("-rounds"), (cmd, f)
    assert "--repeats" not in _visible(COMMANDS["evaluate"]) and "--seeds" in _visible(COMMANDS["evaluate"])
    for cmd in ("measure", "datagen"):
        assert "timed launches" in _visible(COMMANDS[cmd])["--repeats"].help


def test_kernel_file_help_names_both_languages():
    for cmd, p in COMMANDS.items():
        a = _visible(p).get("--kernel")
        if a is not None:
            assert ".cl" in a.help and ".cu" in a.help, cmd


@pytest.mark.parametrize("cmd", [c for c, p in COMMANDS.items() if "--build-options" in _visible(p)])
def test_build_options_take_a_dash_leading_value(cmd):
    words = cmd.split()
    for form in (["--build-options", "-DBLOCK=256"], ["--build-options=-DBLOCK=256"],
                 ["--build-options", "-DBLOCK=256 -DTILE=16"]):
        # every command's required options, so that only the form under test varies
        required = {"dataset import-kt": ["--out", "ds"]}.get(cmd, ["--gsize", "64"])
        ns = build_parser().parse_args([*words, "--kernel", "k.cl", *required, *form])
        assert ns.build_options == form[-1].removeprefix("--build-options=")


def test_join_dash_values_stops_at_double_dash():
    opts = {"--build-options"}
    assert join_dash_values(["--build-options", "-DX", "--json"], opts) == ["--build-options=-DX", "--json"]
    assert join_dash_values(["--", "--build-options", "-DX"], opts) == ["--", "--build-options", "-DX"]
    assert join_dash_values(["--build-options", "plain"], opts) == ["--build-options", "plain"]


def _required(p: argparse.ArgumentParser) -> list[str]:
    """Words that satisfy a command's required arguments (values are not checked while parsing)."""
    out: list[str] = []
    for a in p._actions:
        if a.required:
            out += [a.option_strings[0], "x"] if a.option_strings else ["x"]
    return out


@pytest.mark.parametrize("cmd,old,new,words,stored", ALIASES)
def test_renamed_flag_still_works_and_warns(cmd, old, new, words, stored, capsys):
    p = COMMANDS[cmd]
    new_action = _visible(p)[new]
    old_action = next(a for a in p._actions if old in a.option_strings)
    assert old_action.help == argparse.SUPPRESS and old_action.dest == new_action.dest
    ns = p.parse_args([*_required(p), old, *words])
    assert getattr(ns, new_action.dest) == stored
    assert f"kernelcast: warning: {old} is now {new}" in capsys.readouterr().err
    ns = p.parse_args([*_required(p), new, *[w if w != old else new for w in words]])
    assert getattr(ns, new_action.dest) == stored
    assert capsys.readouterr().err == ""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_assembly_imports_a_command_line_module():
    """No module but kernelcast/cli.py (and the ``python -m kernelcast`` entry, the commands page) imports a ``cli``
    module, counting imports inside functions: the demo and the library take shared formatters from
    library modules (train/report.py, calib/report.py), so kernelcast.cli <-> kernelcast.demo is no cycle."""
    bad = []
    for pkg in ("kernelcast", "instrument", "datagen", "calib", "models", "train", "bench"):
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ("kernelcast/cli.py", "kernelcast/__main__.py", "kernelcast/commands_doc.py"):
                continue
            for m in _imports(path):
                if m.split(".")[-1] == "cli" and m.startswith("kernelcast"):
                    bad.append(f"{rel} imports {m}")
    assert not bad, "\n".join(sorted(bad))
    assert "kernelcast.cli" not in _imports(ROOT / "kernelcast" / "demo.py")


def test_demo_presets():
    from kernelcast.calib.local import QUICK_RUNS

    from kernelcast.demo import PRESETS, demo_settings

    assert PRESETS["full"]["calib_rounds"] == QUICK_RUNS
    p = COMMANDS["demo"]
    assert demo_settings(p.parse_args([])) == PRESETS["quick"]
    assert demo_settings(p.parse_args(["--full"])) == PRESETS["full"]
    assert demo_settings(p.parse_args(["--full", "--epochs", "1"]))["epochs"] == 1
    assert all(PRESETS["quick"][k] <= PRESETS["full"][k] for k in PRESETS["full"] if k != "bundled_every")


def test_the_commands_page_is_current():
    """docs/commands.md is generated from these parsers; regenerate it with python -m kernelcast.commands_doc."""
    from kernelcast.commands_doc import PAGE, render

    assert PAGE.read_text(encoding="utf-8") == render(), "run: python -m kernelcast.commands_doc"
    text = render()
    for words in COMMANDS:
        assert f"## kernelcast {words}\n" in text
    assert "| evaluate | `--repeats` | `--seeds` |" in text


def _top_commands(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(c.dest, c.help or "") for c in sub._choices_actions]


def _choice(parser: argparse.ArgumentParser, word: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[word]


def test_a_command_line_builds_only_its_own_commands_parser_and_the_list_stays_whole():
    import subprocess
    import sys

    from kernelcast.cli import STAGE_COMMANDS, command_word

    whole = build_parser()
    full = _top_commands(whole)
    assert [n for n, _ in full if n in STAGE_COMMANDS] == list(STAGE_COMMANDS)
    assert {n: h for n, h in full if n in STAGE_COMMANDS} == {n: t[2] for n, t in STAGE_COMMANDS.items()}
    for word in ["", "measure", "nonsense", *STAGE_COMMANDS]:
        lazy = build_parser(word)
        assert _top_commands(lazy) == full, word               # every command listed, with the same help
        if word in STAGE_COMMANDS:                             # and the command itself fully built
            assert _choice(lazy, word).format_help() == _choice(whole, word).format_help(), word
    assert command_word(["-v", "--verbose", "dataset", "summary", "x"]) == "dataset" and command_word(["-v"]) == ""
    # --help imports none of the later stages (their cli modules import pandas, the models, ...)
    code = ("import sys, contextlib, io\nfrom kernelcast.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\n"
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('kernelcast.') and "
            "m.split('.')[1] in ('datagen', 'calib', 'models', 'train', 'bench')}), 'pandas' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["[]", "False"], (r.stdout, r.stderr)
