"""The habits of nvidia-ctk, podman and kubectl users: -o/--output, -q, short flags, shell
completion and a man page generated from the parser, the CGPU_* variables in --help."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cgpu.cli import _parser
from cgpu.shell import commands, walk
from tests.conftest import REPO

LONG = ("--backend", "cdi", "--engine", "none", "--spec-dir", "cdi-samples/nvidia-8gpu-mig/spec")
ROOT = ("--root", "cdi-samples/hosts/nvidia-580")
SHORT = ("-b", "cdi", "-e", "none", "-s", "cdi-samples/nvidia-8gpu-mig/spec", "-r", "cdi-samples/hosts/nvidia-580")


def _without_time(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "checked_at"}


def test_output_formats_give_the_same_report(run_cli):
    code, out, _ = run_cli("probe", *LONG, *ROOT, "--json")
    report = _without_time(json.loads(out))
    assert code == 0
    assert _without_time(json.loads(run_cli("probe", *LONG, *ROOT, "-o", "json")[1])) == report
    assert _without_time(yaml.safe_load(run_cli("probe", *LONG, *ROOT, "-o", "yaml")[1])) == report
    names = [d["name"] for d in report["devices"]]
    assert run_cli("probe", *LONG, *ROOT, "-o", "name")[1].splitlines() == names
    assert run_cli("probe", *LONG, *ROOT, "-q")[1].splitlines() == names
    assert run_cli("probe", *LONG, *ROOT, "--list-devices", "-q")[1].splitlines() == names
    wide = run_cli("probe", *LONG, *ROOT, "-o", "wide", env={"COLUMNS": "80"})[1]
    assert "…" not in wide and "nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f04  ok" in wide
    assert run_cli("probe", *LONG, *ROOT, "-o", "xml")[0] == 2


def test_short_flags_are_the_long_ones(run_cli):
    long = json.loads(run_cli("probe", *LONG, *ROOT, "--device", "nvidia.com/gpu=4", "--json")[1])
    short = json.loads(run_cli("probe", *SHORT, "-d", "nvidia.com/gpu=4", "--json")[1])
    assert _without_time(long) == _without_time(short) and [d["name"] for d in short["devices"]] == ["nvidia.com/gpu=4"]


def _every_flag() -> dict[str, list[str]]:
    return {" ".join(n.path): [f for o in n.options for f in o.flags] for n in walk(commands(_parser()))}


def _bash_complete(script: Path, *words: str) -> list[str]:
    call = " ".join(f"'{w}'" for w in words)
    command = f'source {script}; COMP_WORDS=({call}); COMP_CWORD={len(words) - 1}; _cgpu; echo "${{COMPREPLY[*]}}"'
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_options_and_values(run_cli, tmp_path):
    code, script, _ = run_cli("completion", "bash")
    path = tmp_path / "cgpu.bash"
    path.write_text(script)
    assert code == 0
    assert {"probe", "watch", "image", "schema", "completion", "man"} <= set(_bash_complete(path, "cgpu", ""))
    assert _bash_complete(path, "cgpu", "probe", "--b") == ["--brief", "--backend"]
    assert _bash_complete(path, "cgpu", "probe", "-b", "") == ["cdi", "wsl", "krunkit", "local"]
    assert _bash_complete(path, "cgpu", "probe", "-o", "") == ["json", "yaml", "name", "wide"]
    assert _bash_complete(path, "cgpu", "image", "") == ["check", "-h", "--help"]
    assert "--machine" in _bash_complete(path, "cgpu", "image", "check", "--")
    for command, flags in _every_flag().items():  # generated from the parser: nothing left out
        assert set(flags) <= set(_bash_complete(path, "cgpu", *command.split(), "")), command


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_option(run_cli, shell, tmp_path):
    code, script, _ = run_cli("completion", shell)
    assert code == 0
    for flags in _every_flag().values():
        for flag in flags:
            if shell == "fish":
                assert (f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}") in script, flag
            else:
                assert flag in script, flag
    if shutil.which(shell):  # a syntax check where the shell is installed
        (tmp_path / "script").write_text(script)
        done = subprocess.run([shell, "-n", str(tmp_path / "script")], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_the_man_page_renders_and_names_every_option(run_cli, tmp_path):
    code, page, _ = run_cli("man")
    (tmp_path / "cgpu.1").write_text(page)
    done = subprocess.run(
        ["man", "--warnings", "-l", str(tmp_path / "cgpu.1")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MANPAGER": "cat", "PAGER": "cat"},
    )
    assert code == 0 and done.returncode == 0 and done.stderr == "", done.stderr
    text = re.sub(r".\x08", "", done.stdout)
    assert text.startswith("CGPU(1)") and "CGPU IMAGE CHECK" in text and "exit status:" in text
    for flags in _every_flag().values():
        for flag in flags:
            assert flag in text, flag


def test_every_cgpu_variable_cgpu_reads_is_named_in_help(run_cli):
    read = set()
    for path in (REPO / "cgpu").rglob("*.py"):
        if path.name != "standalone.py":
            read |= set(re.findall(r"""environ\.get\(\s*["'](CGPU_[A-Z_]+)""", path.read_text()))
            read |= set(re.findall(r"""_ENV\b.*=\s*["'](CGPU_[A-Z_]+)""", path.read_text()))
    assert {"CGPU_CACHE_DIR", "CGPU_WSL_DISTRO", "CGPU_KRUNKIT_EXE", "CGPU_VERIFY_LABEL"} <= read
    probe, watch = run_cli("probe", "--help")[1], run_cli("watch", "--help")[1]
    for name in read:
        assert name in probe and name in watch, name
