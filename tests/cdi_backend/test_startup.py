"""The static CLI's start-up: with the specs in the disk cache, `cgpu probe --backend cdi` loads
none of the modules that made it slow (bench/bench_cdi.py --installed measures the time). A
module here that shows up again is a start-up regression: import it where it is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

from .helpers import HOSTS, SAMPLES

# typing, dataclasses (and inspect, its machinery), pathlib and datetime cost more than the
# rest of the reader; yaml is needed only to parse a spec the disk cache does not hold;
# pydantic, docker, podman, requests and the image check (cgpu.image) belong to other commands
# and backends.
NOT_ON_THE_STATIC_PATH = (
    "typing",
    "dataclasses",
    "inspect",
    "pathlib",
    "datetime",
    "base64",
    "yaml",
    "pydantic",
    "docker",
    "podman",
    "requests",
    "cgpu.image",
)
PROGRAM = """
import sys
from cgpu.cdi import spec_cache
spec_cache.RACY_SECONDS = 0  # store the spec even in a checkout made just now
from cgpu.cli import main
code = main({argv!r})
print(sorted(m for m in {modules!r} if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("engine", [["--engine", "none"], []], ids=["engine-none", "engine-auto"])
def test_the_static_cli_with_warm_caches_loads_no_slow_module(tmp_path, engine) -> None:
    argv = ["probe", "--backend", "cdi", "--spec-dir", str(SAMPLES / "nvidia-8gpu-mig" / "spec")]
    argv += ["--root", str(HOSTS / "nvidia-580"), "--json", *engine]
    env = {**os.environ, "CGPU_CACHE_DIR": str(tmp_path / "cache")}
    program = PROGRAM.format(argv=argv, modules=NOT_ON_THE_STATIC_PATH)
    runs = [
        subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
        for _ in range(2)  # the first fills the disk cache
    ]
    assert [run.returncode for run in runs] == [0, 0], runs[-1].stderr
    assert "yaml" in runs[0].stderr  # the first run parsed the spec: the check can see a module
    assert runs[1].stderr.splitlines()[-1] == "[]", runs[1].stderr
    assert json.loads(runs[1].stdout)["devices"]
