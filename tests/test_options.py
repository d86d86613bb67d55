"""The options table (`cgpu/options.py`) is the one source of every backend option: each entry
reaches argparse (probe and watch), the library's keyword checks and --help; an option added to
a table alone reaches all three; and no other module spells a default the table holds."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path

import pytest

import cgpu
from cgpu import cli
from cgpu.options import (
    BACKENDS,
    DEFAULT_ROOT,
    DEFAULT_SPEC_DIRS,
    MAX_TIMEOUT,
    OPTIONS,
    Option,
    check_keywords,
    check_names,
    flag_of,
    in_range,
    taken_by,
)

PACKAGE = Path(cgpu.__file__).resolve().parent
TABLE = PACKAGE / "options.py"


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["probe", "watch"])
def test_every_option_reaches_argparse_as_its_kind(command):
    actions = {a.dest: a for a in _subparser(command)._actions}
    for option in OPTIONS:
        action = actions[option.keyword]
        assert action.option_strings == [f for f in (option.short, option.flag) if f]
        if option.kind == "flag":
            assert isinstance(action, argparse._StoreTrueAction)
        elif option.kind in ("texts", "paths"):
            assert isinstance(action, argparse._AppendAction)
        else:
            assert isinstance(action, argparse._StoreAction)
        assert (action.type is cli._seconds) == (option.kind == "seconds")
        assert action.help == option.help


@pytest.mark.parametrize("command", ["probe", "watch"])
def test_every_option_is_in_the_help_under_its_group(command):
    blocks = _subparser(command).format_help().split("\n\n")  # argparse's groups, a title line each
    sections = {block.split("\n", 1)[0]: _flat(block) for block in blocks}
    for option in OPTIONS:
        section = sections[f"{option.group or 'options'}:"]
        assert option.flag in section and _flat(option.help) in section, option


def test_the_library_takes_exactly_the_tables_keywords_with_not_given_defaults():
    parameters = inspect.signature(cgpu.probe).parameters
    # `image` is no backend option: it is applied to the report the backend gives (cgpu.image.answer)
    keywords = [p for p in parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "image"]
    assert sorted(p.name for p in keywords) == sorted(o.keyword for o in OPTIONS)
    kinds = {o.keyword: o.kind for o in OPTIONS}
    for parameter in keywords:
        assert parameter.default is (False if kinds[parameter.name] == "flag" else None), parameter
        assert f"`{parameter.name}`" in (cgpu.probe.__doc__ or ""), "the docstring names each keyword"


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_takes_exactly_the_keywords_the_table_gives_it(backend):
    import importlib

    probe = importlib.import_module(f"cgpu.backends.{backend}").probe
    parameters = inspect.signature(probe).parameters.values()
    assert {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY} == taken_by(backend)


_WRONG = {
    "text": (3, "must be a str, not int"),
    "path": (3, "must be a str or os.PathLike path, not int"),
    "texts": ("a", "must be a list of str, not a single str"),
    "paths": ("a", "must be a list of paths, not a single str"),
    "flag": ("yes", "must be True or False, not str 'yes'"),
    "seconds": ("5", r"must be a number of seconds \(int or float\), not str '5'"),
}


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.keyword)
def test_every_option_is_type_checked_by_the_library_by_its_kind(option):
    value, words = _WRONG[option.kind]
    with pytest.raises(cgpu.CgpuTypeError, match=f"^{option.keyword} {words}"):
        cgpu.probe(option.backends[0], **{option.keyword: value})


_RIGHT = {"text": "x", "path": "/x", "texts": ["x"], "paths": ["/x"], "flag": True, "seconds": 5}


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_refuses_the_options_of_the_others(backend):
    for option in OPTIONS:
        if backend in option.backends:
            continue
        with pytest.raises(cgpu.CgpuTypeError, match=f"the {backend} backend does not take {option.keyword}$"):
            cgpu.probe(backend, **{option.keyword: _RIGHT[option.kind]})


def test_an_option_added_to_a_table_alone_reaches_argparse_the_checks_and_the_help():
    pool = Option(
        "pools", "--pool", "texts", ("cdi", "wsl"), short="-p", metavar="NAME", help="only these pools, repeatable"
    )
    fast = Option("fast", "--fast", "flag", ("krunkit",), help="skip the slow checks")
    limit = Option("limit", "--limit", "seconds", ("wsl",), metavar="SECONDS", help="the other limit")
    table = (*OPTIONS, pool, fast, limit)
    parser = argparse.ArgumentParser(prog="cgpu probe")
    cli.add_options(parser, table)

    args = parser.parse_args(["-p", "a", "--pool", "b", "--fast", "--limit", "9"])
    assert (args.pools, args.fast, args.limit) == (["a", "b"], True, 9.0)
    assert cli.backend_options(parser, parser.parse_args(["--pool", "a"]), "wsl", table) == {"pools": ["a"]}
    with pytest.raises(SystemExit):
        parser.parse_args(["--limit", "0"])  # the range of seconds, as --timeout's
    help_text = _flat(parser.format_help())
    assert "-p NAME, --pool NAME only these pools, repeatable" in help_text
    assert help_text.index("krunkit backend (macOS)") < help_text.index("--fast skip the slow checks")
    assert help_text.index("wsl backend (Windows)") < help_text.index("--limit SECONDS the other limit")

    assert check_keywords({"pools": ("a",), "fast": False, "limit": 3}, table) == {"pools": ["a"], "limit": 3.0}
    with pytest.raises(cgpu.CgpuTypeError, match=r"^pools must be a list of str, not a single str"):
        check_keywords({"pools": "a"}, table)
    with pytest.raises(cgpu.CgpuValueError, match=r"^limit must be a positive number of seconds, at most 604800"):
        check_keywords({"limit": MAX_TIMEOUT * 2}, table)
    assert "pools" in taken_by("cdi", table) and "fast" in taken_by("krunkit", table)
    assert flag_of("pools", table) == "--pool"
    with pytest.raises(cgpu.CgpuTypeError, match="the cdi backend does not take fast"):
        check_names("cdi", ["pools", "fast"], table)


def test_usage_errors_and_misplaced_options_name_the_tables_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["probe", "--backend", "wsl", "--spec-dir", "/x", "--vm-image", "/y"])
    assert exited.value.code == 2
    assert "--spec-dir, --vm-image do(es) not apply to --backend wsl" in capsys.readouterr().err
    assert cli.main(["probe", "-b", "cdi", "-e", "none", "-r", "/nonexistent-root", "--json"]) == 2
    assert "cgpu probe: error: argument --root: '/nonexistent-root' is not a directory" in capsys.readouterr().err
    assert [flag_of(o.keyword) for o in OPTIONS] == [o.flag for o in OPTIONS]


def test_the_seconds_range_is_one_check():
    assert in_range(MAX_TIMEOUT) and in_range(0.001)
    assert not any(in_range(v) for v in (0, -1, float("nan"), float("inf"), MAX_TIMEOUT * 1.001))


# --- one place for each default: no module but the table spells one ---------------------------


_BOUNDS = ("MAX_TIMEOUT", "MIN_TIMEOUT")
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # spelled here too, so the check does not trust the table's value


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _spelled_defaults(path: Path) -> list[str]:
    """Where a module spells a default the table holds: a default spec dir as a string, the
    week that bounds a timeout as a number (or its product), a range check against the bounds
    by hand, or the root default as a `root` parameter's default or an `x or "/"` fallback."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    week = 7 * 24 * 3600
    shown = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path.name
    for node in ast.walk(tree):
        where = f"{shown}:{getattr(node, 'lineno', '?')}"
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.rstrip("/") in DEFAULT_SPEC_DIRS
        ):
            found.append(f"{where}: {node.value!r}")
        elif _number(node) and node.value == week:  # type: ignore[attr-defined]
            found.append(f"{where}: {node.value!r}")  # type: ignore[attr-defined]
        elif isinstance(node, ast.BinOp) and all(
            _number(n) for n in ast.walk(node) if not isinstance(n, ast.BinOp | ast.operator)
        ):
            try:
                value = eval(compile(ast.Expression(node), "<bound>", "eval"), {"__builtins__": {}})
            except Exception:
                continue
            if type(value) in (int, float) and value == week:
                found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare) and any(_name(n) in _BOUNDS for n in (node.left, *node.comparators)):
            found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            last = node.values[-1]
            if isinstance(last, ast.Constant) and last.value == DEFAULT_ROOT and "root" in ast.unparse(node.values[0]):
                found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.arguments):
            named = [*node.posonlyargs, *node.args]
            pairs = list(zip(named[len(named) - len(node.defaults) :], node.defaults)) + list(
                zip(node.kwonlyargs, node.kw_defaults)
            )
            for arg, default in pairs:
                if "root" in arg.arg and isinstance(default, ast.Constant) and default.value == DEFAULT_ROOT:
                    found.append(f"{where}: {arg.arg}={default.value!r}")
    return found


def test_no_module_but_the_table_spells_a_default_spec_dir_the_timeout_bounds_or_the_root():
    modules = [p for p in PACKAGE.rglob("*.py") if p != TABLE and "gpu_probe" not in p.parts]
    assert len(modules) > 40
    assert [hit for path in modules for hit in _spelled_defaults(path)] == []
    assert len(_spelled_defaults(TABLE)) >= 3  # the table itself: the dirs, the week, the range check


def test_the_check_sees_each_way_of_spelling_a_default(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        'DIRS = ("/etc/cdi", "/var/run/cdi/")\nLIMIT = 7 * 24 * 3600.0\nWEEK = 604800\n'
        "def f(root='/', t=1.0):\n    return (root or '/') if 0 < t <= MAX_TIMEOUT else None\n"
    )
    found = [hit.split(": ", 1)[1] for hit in _spelled_defaults(module)]
    assert found.count("'/etc/cdi'") == 1 and "'/var/run/cdi/'" in found
    assert "7 * 24 * 3600.0" in found and "604800" in found
    assert "root='/'" in found and "root or '/'" in found and "0 < t <= MAX_TIMEOUT" in found


def test_the_help_says_the_tables_defaults():
    help_text = _flat(_subparser("probe").format_help())
    assert re.search(r"default: /etc/cdi, then /var/run/cdi", help_text)
    assert f"(default: {DEFAULT_ROOT})" in help_text
