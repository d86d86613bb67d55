"""Each backend package's `__init__.py` is its face only: imports, re-exports and `__all__`, no
function or class. Its code lives in named modules, so importing one part of a backend (say
`cgpu.backends.krunkit.image_files`) does not load the whole backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BACKENDS = Path(__file__).resolve().parent.parent / "cgpu" / "backends"
PACKAGES = sorted(path.parent.name for path in BACKENDS.glob("*/__init__.py"))


# A lazy face (PEP 562): the names it re-exports, mapped to their modules, loaded on first use
_LAZY_FACE = {"_EXPORTS", "__getattr__", "__dir__"}


def _type_checking_imports(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and ast.unparse(node.test) == "TYPE_CHECKING"
        and not node.orelse
        and all(isinstance(inner, ast.Import | ast.ImportFrom) for inner in node.body)
    )


def _code_in(init: Path) -> list[str]:
    """What the file holds besides its docstring, imports, `__all__` and a lazy face, as `line: what`."""
    found = []
    for index, node in enumerate(ast.parse(init.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import | ast.ImportFrom) or _type_checking_imports(node):
            continue
        if isinstance(node, ast.FunctionDef) and node.name in _LAZY_FACE:
            continue
        if (
            isinstance(node, ast.Assign)
            and [ast.unparse(t) for t in node.targets] == ["_EXPORTS"]
            and isinstance(node.value, ast.Dict)
            and all(isinstance(v, ast.Constant) for v in node.value.values)
        ):
            continue
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, ast.Assign | ast.AnnAssign) and all(
            isinstance(t, ast.Name) and t.id == "__all__" for t in targets
        ):
            continue
        what = getattr(node, "name", None) or ast.unparse(node).splitlines()[0]
        found.append(f"{node.lineno}: {type(node).__name__} {what}")
    return found


def test_every_backend_is_a_package():
    assert {"cdi", "wsl", "krunkit", "local"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_a_backend_package_init_only_re_exports(name):
    init = BACKENDS / name / "__init__.py"
    assert _code_in(init) == [], f"{init.relative_to(BACKENDS.parent.parent)} holds code; move it to a named module"
    module = __import__(f"cgpu.backends.{name}", fromlist=["probe"])
    exported = module.__all__
    assert "probe" in exported and callable(module.probe)  # what run_backend calls
    assert all(hasattr(module, item) for item in exported)


def test_code_in_an_init_is_found(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text('"""Doc."""\n\nfrom x import y\n\n__all__ = ["y"]\nLIMIT = 3\n\n\ndef probe():\n    pass\n')
    assert _code_in(init) == ["6: Assign LIMIT = 3", "9: FunctionDef probe"]


def test_a_lazy_face_passes_and_code_beside_it_is_found(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text(
        "if TYPE_CHECKING:\n    from x import y\n_EXPORTS = {'y': 'x'}\n__all__ = sorted(_EXPORTS)\n"
        "def __getattr__(name):\n    pass\ndef judge():\n    pass\nif TYPE_CHECKING:\n    LIMIT = 3\n"
    )
    assert _code_in(init) == ["7: FunctionDef judge", "9: If if TYPE_CHECKING:"]
