"""The package face (`cgpu/__init__.py`) sits above every module: no module imports a name from
it (only its submodules, `from cgpu import render`), so no import runs back up the layers."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cgpu"


def _names_taken_from_the_face(path: Path) -> list[str]:
    taken = []
    shown = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "cgpu":
            for alias in node.names:
                submodule = PACKAGE / alias.name
                if not (submodule.with_suffix(".py").is_file() or (submodule / "__init__.py").is_file()):
                    taken.append(f"{shown}:{node.lineno}: {alias.name}")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "cgpu"
            and not (PACKAGE / f"{node.attr}.py").is_file()
            and not (PACKAGE / node.attr).is_dir()
        ):
            taken.append(f"{shown}:{node.lineno}: cgpu.{node.attr}")
    return taken


def test_no_module_imports_from_the_package_face():
    modules = [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py"]
    assert len(modules) > 40
    assert [name for path in modules for name in _names_taken_from_the_face(path)] == []


def test_the_check_sees_a_name_taken_from_the_face(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from cgpu import __version__, render\nimport cgpu\nx = cgpu.probe\n")
    assert [line.split(": ", 1)[1] for line in _names_taken_from_the_face(module.resolve())] == [
        "__version__",
        "cgpu.probe",
    ]
