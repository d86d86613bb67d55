"""The engine registry (`cgpu/engines/registry.py`) is the one list of engines: `--engine`'s choices and
help, the report model's engine names, what is looked for on a node and the order of the report's
engines come from it; an engine is one module and one entry, and an engine added that way (here, a
module a test makes) is picked up by all of them."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import cgpu
from cgpu.engines import registry
from cgpu.engines.base import ContainerEngine
from cgpu.engines.installed import learn
from cgpu.engines.option import parse_engine
from cgpu.engines.registry import REGISTRY, Registry
from cgpu.options import OPTIONS
from tests.conftest import REPO

PACKAGE = Path(cgpu.__file__).resolve().parent
# An engine cgpu does not know, as a module of its own: its rows, its binary, its configuration file
INCUS = """
from cgpu.engines.base import ContainerEngine


class Incus(ContainerEngine):
    __slots__ = ()

    name = "incus"
    example = "6.0.0"
    daemon = "incusd"
    packages = ("incus",)
    rows = (((6, 0), "0.6.0", "v0.6.2"), ((6, 8), "0.8.0", "v0.8.0"))
    no_cdi_below = (6, 0)
    on_by_default_from = (6, 8)
    unread_setting = "cdi = true"

    def read_configuration(self, read, listdir, *, major, flavour, on_host):
        from cgpu.engines.config import Config, spec_dirs_setting, table, toml_file

        config = Config()
        document = toml_file(read, "/etc/incus/cdi.toml", config)
        found = table(document, "cdi") if document is not None else None
        if found is not None:
            if isinstance(found.get("enabled"), bool):
                config.enabled = found["enabled"]
            spec_dirs_setting(found, "spec_dirs", read("/etc/incus/cdi.toml")[2], config)
        return config


ENGINE = Incus()
"""


@pytest.fixture
def with_incus(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """The registry with the test's engine module, `incus`, last."""
    module = types.ModuleType("incus_engine_for_a_test")
    exec(compile(INCUS, "incus_engine_for_a_test.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    added = REGISTRY.with_engine("incus", module.__name__)
    monkeypatch.setattr(registry, "REGISTRY", added)
    return added


def test_the_registry_lists_the_engines_in_autos_order_one_module_each():
    assert REGISTRY.names == ("podman", "docker", "crio", "containerd", "cri-dockerd")
    for name, module in REGISTRY.modules.items():
        stem = name.replace("-", "_")  # a module name cannot hold the engine's hyphen
        assert module == f"cgpu.engines.{stem}" and (PACKAGE / "engines" / f"{stem}.py").is_file()
        engine = REGISTRY.get(name)
        assert isinstance(engine, ContainerEngine) and engine.name == name
        assert engine.daemon and engine.packages and engine.example
        if engine.rows:  # the example a message gives is one it knows
            assert engine.max_cdi_version(engine.example) is not None
        else:  # a CRI that passes no CDI device on (cri-dockerd): its example reads none, and it says why
            assert engine.max_cdi_version(engine.example) is None and "CDI" in engine.without_cdi


def test_the_registry_drives_the_engine_options_choices_and_help():
    [option] = [o for o in OPTIONS if o.keyword == "engine"]
    assert "podman, docker, crio, containerd or cri-dockerd: that one as installed" in option.help
    for name in REGISTRY.names:
        assert parse_engine(name).name == name
        example = REGISTRY.get(name).example
        assert str(parse_engine(f"{name}@{example}")) == f"{name}@{example}"
    with pytest.raises(
        ValueError, match="podman@4.3.1, docker@28.2.0, crio@1.31.0, containerd@1.7.27 or cri-dockerd@0.4.3"
    ) as info:
        parse_engine("runc")
    assert "a bare podman, docker, crio, containerd, cri-dockerd (the one installed here)" in str(info.value)


def test_the_registry_drives_the_models_engine_names():
    from cgpu.model import Engine

    assert Engine.model_json_schema()["properties"]["name"]["enum"] == list(REGISTRY.names)


def test_an_engine_module_added_is_parsed_judged_by_its_rows_and_named(with_incus: Registry):
    assert with_incus.spoken() == "podman, docker, crio, containerd, cri-dockerd or incus"
    assert parse_engine("incus").name == "incus"
    assert registry.max_cdi_version("incus", "6.9.1") == "0.8.0"
    assert registry.max_cdi_version("incus", "5.9") is None  # before its first CDI release
    assert registry.first_release_reading("incus", "0.8.0") == "6.8"
    with pytest.raises(ValueError, match="incus@6.0.0"):
        parse_engine("runc")
    with pytest.raises(ValueError, match="unknown engine 'lxd'; cgpu knows the CDI limits of .*, incus"):
        parse_engine("lxd@5.0")


def incus_node(tmp_path: Path) -> Path:
    """A node with the test's engine installed and CDI off in its configuration."""
    root = tmp_path / "node"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/incusd").write_bytes(b"not a Go binary")
    (root / "etc/incus").mkdir(parents=True)
    (root / "etc/incus/cdi.toml").write_text('[cdi]\nenabled = false\nspec_dirs = ["/srv/cdi"]\n')
    return root


def test_an_engine_module_added_is_looked_for_and_configured_on_a_node(with_incus: Registry, tmp_path: Path):
    root = incus_node(tmp_path)
    engines, _ = learn(str(root), run_allowed=False, timeout=5)
    [incus] = engines
    assert (incus.name, incus.binary, incus.spec_dirs, incus.cdi_enabled) == (
        "incus",
        "/usr/bin/incusd",
        ("/srv/cdi",),
        False,
    )


# The CLI, the report model and the schema read the registry when they are imported: a fresh process,
# the registry given the test's engine before anything else of cgpu is imported.
PROGRAM = """
import contextlib, io, json, sys, types
module = types.ModuleType("incus_engine_for_a_test")
exec({source!r}, module.__dict__)
sys.modules[module.__name__] = module
from cgpu.engines import registry
registry.REGISTRY = registry.REGISTRY.with_engine("incus", module.__name__)
from cgpu import cli
def printed(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(argv)
    return out.getvalue()
schema = json.loads(printed(["schema"]))
probe = ["probe", "--backend", "cdi", "--root", {root!r}, "--engine", "incus@6.8.1", "--json"]
import argparse
sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
help = sub.choices["probe"].format_help()
names = schema["$defs"]["Engine"]["properties"]["name"]["enum"]
print(json.dumps({{"names": names, "help": " ".join(help.split()), "report": json.loads(printed(probe))}}))
"""


def test_an_engine_module_added_reaches_the_cli_help_the_schema_and_the_report(tmp_path: Path):
    root = incus_node(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(source=INCUS, root=str(root))],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["names"] == ["podman", "docker", "crio", "containerd", "cri-dockerd", "incus"]
    helped = seen["help"].replace("cri- dockerd", "cri-dockerd")  # argparse may wrap a line at the hyphen
    assert "podman, docker, crio, containerd, cri-dockerd or incus: that one as installed" in helped
    report = seen["report"]
    [entry] = report["engines"]
    assert (entry["name"], entry["max_cdi_version"], entry["judged"], entry["cdi_enabled"]) == (
        "incus",
        "0.8.0",
        True,
        False,
    )
    assert entry["spec_dirs"] == ["/srv/cdi"] and entry["learned_from"] == "option"
    assert any("incus 6.8.1 has CDI switched off" in p["message"] for p in report["problems"])
