"""One place for each word of the contract, and comments that cite what a reader can open:
"every API but metal" is `cgpu.apis.CONTAINER_APIS`, and a comment names a file of this
repository (docs/, README.md) or a public source, never a document the repository does not hold."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

from cgpu.apis import API_ORDER, CONTAINER_APIS
from cgpu.model import Api, ContainerApi

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "cgpu"
# the probe is copied into containers and runs alone: it keeps its own list
OWN_LIST = {PACKAGE / "apis.py", PACKAGE / "gpu_probe" / "standalone.py"}


def test_every_api_but_metal_is_one_constant_and_its_type():
    assert tuple(api for api in API_ORDER if api != "metal") == CONTAINER_APIS
    # the report model's (what pydantic validates and the schema lists) ...
    assert get_args(ContainerApi) == CONTAINER_APIS
    assert get_args(Api) == API_ORDER
    # ... and the type checkers' (cgpu.apis spells them for mypy only: typing is not imported at run time)
    spelled = {
        ast.unparse(node.targets[0]): node.value
        for node in ast.walk(ast.parse((PACKAGE / "apis.py").read_text()))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript)
    }
    assert tuple(ast.literal_eval(spelled["ContainerApi"].slice)) == CONTAINER_APIS
    assert ast.unparse(spelled["Api"].slice) == "(ContainerApi, 'metal')"


def _api_lists(source: str) -> list[str]:
    """Where a module spells several API names as a list of its own, or takes metal out of API_ORDER."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(names) == len(node.elts) and set(names) in ({*CONTAINER_APIS}, {*API_ORDER}):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "API_ORDER":
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for loop in node.generators:
                if ast.unparse(loop.iter) == "API_ORDER" and any("metal" in ast.unparse(c) for c in loop.ifs):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_spells_the_api_list_again():
    modules = [p for p in PACKAGE.rglob("*.py") if p not in OWN_LIST]
    assert len(modules) > 40
    found = [f"{p.relative_to(REPO)}:{line}" for p in modules for line in _api_lists(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_check_sees_each_spelling():
    source = (
        'APIS = ("cuda", "rocm", "vulkan", "opencl", "directml")\n'
        "x = API_ORDER[:-1]\n"
        'y = [a for a in API_ORDER if a != "metal"]\n'
        'z = Literal["cuda", "rocm", "vulkan", "opencl", "directml", "metal"]\n'
        'ok = ("cuda", "opencl", "vulkan")\n'
    )
    assert [int(line.split(":")[0]) for line in _api_lists(source)] == [1, 2, 3, 4]


# A design document, a reference folder or a placement note that lives outside the repository.
ABSENT = re.compile(r"design(\.md| §)|\breference/|gpu-placement")
CITED_FILE = re.compile(r"\b((?:docs|bench|scripts|tests)/[\w./-]+\.(?:md|py)|README\.md)")


def _python_files() -> list[Path]:
    return [*PACKAGE.rglob("*.py"), *(REPO / "bench").rglob("*.py")]


def test_comments_cite_nothing_the_repository_does_not_hold():
    absent, missing = [], []
    for path in _python_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(REPO)}:{number}"
            if ABSENT.search(line):
                absent.append(f"{where}: {line.strip()}")
            for cited in CITED_FILE.findall(line):
                if not (REPO / cited).exists():
                    missing.append(f"{where}: {cited}")
    assert absent == []
    assert missing == []


def test_the_citation_check_sees_an_absent_document():
    assert ABSENT.search("# the rules (design §3)") and ABSENT.search("see reference/cdi.md §3.1")
    assert not ABSENT.search("# see docs/cdi.md#speed")
