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
    assert built[0] == {"severity": "warning", "source": "/etc/cdi/a.yaml", "message": "first", "kind": "other"}
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


# --- kinds: what a program reads of a problem ------------------------------------------------------


def test_the_kind_literal_is_the_list_of_kinds():
    import typing

    from cgpu import problem as module
    from cgpu.problem import KINDS

    tree = ast.parse((PACKAGE / "problem.py").read_text())
    [literal] = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["Kind"]
    ]
    assert [e.value for e in literal.slice.elts] == list(KINDS)  # type: ignore[attr-defined]
    assert module.Kind is str and not typing.TYPE_CHECKING  # at run time: no typing import


def test_a_kind_rides_beside_the_three_texts():
    import pickle

    stale = Problem("error", "/etc/cdi/nvidia.yaml", "stale spec: ...", "stale-spec")
    severity, source, message = stale  # still unpacks as three
    assert (severity, source, message) == ("error", "/etc/cdi/nvidia.yaml", "stale spec: ...")
    assert stale.kind == "stale-spec" and Problem("info", "a", "b").kind == "other"
    assert pickle.loads(pickle.dumps(stale)).kind == "stale-spec"
    assert stale.as_dict() == {**dict(zip(("severity", "source", "message"), stale)), "kind": "stale-spec"}
    assert Problem.from_json(stale.as_dict()).kind == "stale-spec"
    assert Problem.from_json({"severity": "info", "source": "s", "message": "m"}).kind == "other"  # written before
    with pytest.raises(ValueError, match="kind"):
        Problem.from_json({**stale.as_dict(), "kind": "stale"})
    report = ReportBuilder("cdi")
    report.add(Problem("error", "x" * (MAX_TEXT + 5), "m", "invalid-spec"))
    report.usage_error("devices", "a malformed name")
    report.failed("wsl.exe", "could not run")
    assert [p["kind"] for p in report.build()["problems"]] == ["invalid-spec", "usage", "could-not-run"]


def _kinds_made_in(source: str) -> set[str]:
    """The kinds a module gives its problems: the 4th argument of `Problem(...)`, `.problem(...)`
    and `.failed(...)` (3rd), and the constants of `Kind`-annotated assignments."""
    made = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            at = {"Problem": 3, "problem": 3, "failed": 2}.get(name)
            if at is not None and len(node.args) > at:
                made |= {c.value for c in ast.walk(node.args[at]) if isinstance(c, ast.Constant)}
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "Kind" and node.value is not None:
            made |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):  # a default: `kind: Kind = "usage"`
            args = node.args.args[-len(node.args.defaults) :] if node.args.defaults else []
            for arg, default in zip(args, node.args.defaults):
                if arg.annotation is not None and ast.unparse(arg.annotation) == "Kind":
                    made |= {default.value} if isinstance(default, ast.Constant) else set()
    return made


def test_every_kind_is_made_somewhere_and_none_is_made_that_is_not_listed():
    from cgpu.problem import KINDS

    made: set[str] = set()
    for path in _modules():
        made |= _kinds_made_in(path.read_text())
    assert made <= set(KINDS), made - set(KINDS)
    assert set(KINDS) - made == set()  # a kind listed and never made is a promise the code does not keep


def _probe_kinds(spec_dirs, root="cdi-samples/hosts/nvidia-580", **options):
    from cgpu.backends import run_backend

    options.setdefault("engine", "none")
    report = run_backend("cdi", {"spec_dirs": [str(d) for d in spec_dirs], "root": str(root), **options}).build()
    return {(p["kind"], p["severity"]) for p in report["problems"]}, report


SAMPLE = PACKAGE.parent / "cdi-samples" / "nvidia-current" / "spec" / "nvidia.yaml"


def test_the_cdi_backends_problems_carry_their_kinds(tmp_path):
    kinds, _ = _probe_kinds(["cdi-samples/nvidia-current/spec"], "cdi-samples/hosts/nvidia-575")
    assert ("stale-spec", "error") in kinds
    kinds, _ = _probe_kinds(["cdi-samples/nvidia-current/spec"], devices=["nvidia.com/gpu=9"])
    assert ("unresolvable-device", "error") in kinds
    kinds, _ = _probe_kinds(["cdi-samples/nvidia-current/spec"], engine="podman@4.3.1")  # reads 0.5.0 at most
    assert ("spec-too-new", "error") in kinds and ("engine", "info") in kinds
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text(SAMPLE.read_text())
    (specs / "b.yaml").write_text(SAMPLE.read_text())  # the same devices twice in one dir
    (specs / "c.json").write_text("{not: [valid")
    (specs / "notes.yml").write_text("")
    kinds, _ = _probe_kinds([specs, tmp_path / "absent"])
    assert {("duplicate-device", "error"), ("invalid-spec", "error"), ("skipped-file", "info")} <= kinds
    assert ("spec-dir", "warning") in kinds
    (specs / "b.yaml").unlink()
    kinds, _ = _probe_kinds([specs], str(tmp_path))  # a host without the spec's files
    assert ("missing-host-files", "error") in kinds
