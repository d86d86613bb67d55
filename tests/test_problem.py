"""One `Problem` type from where a problem is found to where the report is built
(`cgpu.problem`), and the report's model validating and serializing that same type."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from cgpu.problem import Problem
from cgpu.report import MAX_TEXT, ReportBuilder

PACKAGE = Path(__file__).resolve().parent.parent / "cgpu"
# render.py shows a built report, whose problems are JSON objects (also read back from a file)
WRITES_PROBLEM_DICTS = {"problem.py", "render.py"}


@pytest.mark.parametrize(
    "given",
    [
        ("error", "/etc/cdi/a.yaml", "bad"),
        ["error", "/etc/cdi/a.yaml", "bad"],
        {"severity": "error", "source": "/etc/cdi/a.yaml", "message": "bad"},
    ],
)
def test_the_report_builder_takes_only_the_problem_type(given):
    report = ReportBuilder("cdi")
    with pytest.raises(TypeError, match="cgpu.problem.Problem"):
        report.add(given)
    assert report.problems == []


def test_problems_found_elsewhere_keep_their_order_and_are_capped_like_the_builders_own():
    report = ReportBuilder("cdi")
    long = "x" * (MAX_TEXT + 5)
    report.add(Problem("warning", "/etc/cdi/a.yaml", "first"), Problem("info", long, long))
    report.problem("error", "nvidia-ctk", long)
    built = report.build()["problems"]
    assert [p["severity"] for p in built] == ["warning", "info", "error"]
    assert built[0] == {"severity": "warning", "source": "/etc/cdi/a.yaml", "message": "first"}
    assert all(len(p["source"]) <= MAX_TEXT and len(p["message"]) <= MAX_TEXT for p in built)
    assert built[1]["message"].endswith("…") and built[2]["message"] == built[1]["message"]
    assert all(type(p) is Problem for p in report.problems)
    assert json.loads(json.dumps(built)) == built  # plain JSON objects, keys in the report's order


def test_the_report_model_holds_the_same_type_and_dumps_the_same_json():
    from cgpu.model import Report, report_schema

    report = ReportBuilder("cdi")
    report.problem("warning", "/etc/cdi/a.yaml", "a spec made for another driver")
    built = report.build()
    model = Report.model_validate(built)
    assert model.problems == [Problem("warning", "/etc/cdi/a.yaml", "a spec made for another driver")]
    assert all(type(p) is Problem for p in model.problems)
    assert model.model_dump(mode="json")["problems"] == built["problems"]
    assert json.loads(model.model_dump_json())["problems"] == built["problems"]
    assert Report.model_validate({**built, "problems": [Problem("info", "a", "b")]}).problems == [
        Problem("info", "a", "b")
    ]
    with pytest.raises(ValueError, match="severity"):
        Report.model_validate({**built, "problems": [{"severity": "fatal", "source": "a", "message": "b"}]})
    with pytest.raises(ValueError, match="extra"):
        Report.model_validate({**built, "problems": [{"severity": "info", "source": "a", "message": "b", "x": 1}]})
    schema = report_schema()
    assert schema["properties"]["problems"]["items"] == {"$ref": "#/$defs/Problem"}
    assert schema["$defs"]["Problem"]["required"] == ["severity", "source", "message"]


@pytest.mark.parametrize(
    "stored, problem",
    [
        (
            ["error", "/etc/containerd/config.toml", "not TOML"],
            Problem("error", "/etc/containerd/config.toml", "not TOML"),
        ),
        ({"severity": "info", "source": "s", "message": "m"}, Problem("info", "s", "m")),
    ],
)
def test_a_problem_read_back_from_a_cache(stored, problem):
    assert Problem.from_json(stored) == problem
    assert Problem.from_json(json.loads(json.dumps(problem))) == problem  # the tuple JSON makes of it


@pytest.mark.parametrize(
    "stored", [["fatal", "s", "m"], ["error", "s"], ["error", 1, "m"], {"severity": "info"}, "x", None]
)
def test_a_malformed_stored_problem_is_refused(stored):
    with pytest.raises(ValueError):
        Problem.from_json(stored)


def _modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p.name != "standalone.py"]  # the probe runs alone: its own format


def _stray_problem_shapes(source: str, name: str) -> list[str]:
    """Another class named Problem, a problem written as a dict, or a bare tuple added to a
    problems list, in the module `name` (relative to the repository)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if (
            isinstance(node, ast.ClassDef)
            and node.name == "Problem"
            and not name.endswith(("/problem.py", "/model.py"))
        ):
            found.append(f"{where}: class Problem")
        if (
            isinstance(node, ast.Dict)
            and any(isinstance(k, ast.Constant) and k.value == "severity" for k in node.keys)
            and Path(name).name not in WRITES_PROBLEM_DICTS
        ):
            found.append(f"{where}: a problem as a dict")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and "problems" in ast.unparse(node.func.value)
            and any(isinstance(arg, ast.Tuple | ast.Dict | ast.GeneratorExp) for arg in node.args)
            and not all(
                isinstance(arg, ast.GeneratorExp) and ast.unparse(arg.elt).startswith("Problem(") for arg in node.args
            )
        ):
            found.append(f"{where}: {ast.unparse(node)[:60]}")
    return found


def test_problems_have_one_type_from_where_they_are_found():
    modules = _modules()
    assert len(modules) > 40
    found = [
        shape
        for path in modules
        for shape in _stray_problem_shapes(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    ]
    assert found == []


def test_the_check_sees_each_stray_shape():
    source = (
        "class Problem: pass\n"
        "problems.append(('error', 's', 'm'))\n"
        "self.problems.append({'severity': 'error', 'source': 's', 'message': 'm'})\n"
        "problems.extend(('warning', p, w) for w in ws)\n"
        "problems.extend(Problem('warning', p, w) for w in ws)\n"
        "problems.append(Problem('warning', p, w))\n"
    )
    found = _stray_problem_shapes(source, "cgpu/stray.py")
    assert sorted({int(shape.split(":")[1]) for shape in found}) == [1, 2, 3, 4], found
