"""Examples of output in the docs are the tool's output: each fenced block whose first line is
`$ uv run cgpu ...` is run (from the repository root, piped: 80 columns, no colour) and its
output compared with the rest of the block. The version and platform are normalised.

After a deliberate change of output, rewrite the blocks with
    CGPU_UPDATE_DOCS=1 uv run pytest tests/test_docs_examples.py
and review the diff.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", REPO / "cdi-samples/README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```\n(\$ uv run cgpu [^\n]*)\n(.*?)^```$", re.M | re.S)


def _examples() -> list[tuple[Path, str]]:
    return [(doc, match.group(1)) for doc in DOCS for match in BLOCK.finditer(doc.read_text())]


def _run(command: str) -> str:
    argv = shlex.split(command.removeprefix("$ "))
    assert argv[:3] == ["uv", "run", "cgpu"], command
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    done = subprocess.run(
        [sys.executable, "-m", "cgpu", *argv[3:]], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )
    return done.stdout


def _normal(text: str) -> str:
    text = re.sub(r"cgpu \d+\.\d+\.\d+\S*", "cgpu VERSION", text)
    return re.sub(r"\b(linux|darwin|windows)-[a-z0-9_]+\b", r"\1-MACHINE", text)


def test_the_docs_have_runnable_examples():
    assert len(_examples()) >= 3


@pytest.mark.parametrize("doc, command", _examples(), ids=lambda v: v.name if isinstance(v, Path) else v[-60:])
def test_documented_output_is_the_tools(doc, command):
    text = doc.read_text()
    match = next(m for m in BLOCK.finditer(text) if m.group(1) == command)
    output = _run(command)
    if os.environ.get("CGPU_UPDATE_DOCS") == "1":
        doc.write_text(text[: match.start(2)] + output + text[match.end(2) :])
        return
    assert _normal(match.group(2)) == _normal(output), f"{doc.name}: `{command}` prints something else now"
