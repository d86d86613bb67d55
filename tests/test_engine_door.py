"""`cgpu/engines/client.py` is the one door to podman and Docker: no other module imports podman-py or
docker-py, or runs the `podman` or `docker` CLI. A caller asks an `Engine` instead, so that an
engine's quirks (its flags, its errors, its time limits) live in one place. That holds inside the
`cgpu.engines` package too: an engine's own module (`podman.py`, `docker.py`) says what cgpu knows
of it, and reaches it only through the client."""

from __future__ import annotations

import ast
from pathlib import Path

from cgpu.engines.registry import REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "cgpu"
DOOR = PACKAGE / "engines" / "client.py"
# The engines cgpu's client reaches, as the registry says
ENGINES = frozenset(engine.name for engine in REGISTRY.engines() if engine.reached_by_client)
# What starts a process from an argv (cgpu.run's, subprocess's, os's)
SPAWNERS = frozenset(
    {"run", "Popen", "call", "check_call", "check_output", "Helper", "_spawn", "spawnv", "spawnvp", "execv", "execvp"}
)


def _engine(node: ast.AST | None) -> str | None:
    """ "podman" or "docker" where `node` is that string, else None."""
    return node.value if isinstance(node, ast.Constant) and node.value in ENGINES else None


def _head(node: ast.AST | None) -> str | None:
    """The engine an argv literal starts with (`["podman", ...]`, or `[podman, ...]` where the
    name holds its path), else None."""
    if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
        return None
    first = node.elts[0]
    return first.id if isinstance(first, ast.Name) and first.id in ENGINES else _engine(first)


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def engine_calls(path: Path) -> list[str]:
    """Each place in `path` that reaches podman or Docker itself, as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in ENGINES]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in ENGINES:
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Call):
            name, first = _called(node), node.args[0] if node.args else None
            if name in ("which", "import_module", "__import__") and (engine := _engine(first)):
                found.append(f"{node.lineno}: {name}({engine!r})")
            elif name in SPAWNERS and (engine := _head(first)):
                found.append(f"{node.lineno}: {name}([{engine!r}, ...])")
        elif isinstance(node, ast.List) and len(node.elts) > 1 and (engine := _head(node)):
            found.append(f"{node.lineno}: argv [{engine!r}, ...]")
    return found


def test_no_module_but_engines_reaches_podman_or_docker():
    modules = [p for p in PACKAGE.rglob("*.py") if p != DOOR]
    assert len(modules) > 40
    found = [f"{p.relative_to(PACKAGE.parent)}:{where}" for p in modules for where in engine_calls(p)]
    assert found == [], "call podman and Docker through cgpu/engines/client.py (an Engine method):\n" + "\n".join(found)


def test_the_engines_the_client_reaches_are_podman_and_docker():
    assert {"podman", "docker"} == ENGINES


def test_every_module_of_the_engines_package_but_the_client_is_checked_and_keeps_to_the_door():
    package = sorted((PACKAGE / "engines").glob("*.py"))
    engine_modules = {PACKAGE / "engines" / f"{REGISTRY.modules[name].rsplit('.', 1)[1]}.py" for name in REGISTRY.names}
    assert engine_modules <= set(package) and DOOR in package
    found = [f"{p.name}:{where}" for p in package if p != DOOR for where in engine_calls(p)]
    assert found == []


def test_the_door_itself_is_seen():
    """The check is not blind: engines.py does every one of these things."""
    found = " ".join(engine_calls(DOOR))
    assert "from docker.types import" in found and "import podman.errors" in found and "which('podman')" in found


def test_the_check_sees_each_way_round_the_door(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import docker\n"
        "import podman.errors\n"
        "from docker.types import DeviceRequest\n"
        "import shutil, subprocess\n"
        "exe = shutil.which('podman')\n"
        "subprocess.run(('docker', 'ps'))\n"
        "argv = ['podman', 'image', 'exists', 'x']\n"
        "docker = exe\n"
        "subprocess.Popen([docker, 'ps'])\n"
        "names = ('podman', 'docker')  # names, not a command line\n"
    )
    assert [where.split(": ", 1)[1] for where in engine_calls(module)] == [
        "import docker",
        "import podman.errors",
        "from docker.types import",
        "which('podman')",
        "run(['docker', ...])",
        "argv ['podman', ...]",
        "Popen(['docker', ...])",
        "argv ['docker', ...]",
    ]
