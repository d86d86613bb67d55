"""`cgpu krunkit build-image`: podman build on the shipped context, shown live, kept on failure.

`podman` is a stand-in here (CI has no Mac and no registry): it checks the build context it was
given, prints like a build and exits as told."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.timing import assert_within, interpreter_run, timed

FAKE = """#!{python}
import os, sys, time
args = sys.argv[1:]
context = args[-1]
assert os.path.isfile(os.path.join(context, "Containerfile"))
with open(os.environ["FAKE_PODMAN_LOG"], "a") as log:
    log.write(" ".join(args[:-1]) + "\\n" + str(os.getpid()) + "\\n")
print("STEP 1/6: FROM quay.io/fedora/fedora:44", flush=True)
sys.stderr.write("\\x1b]52;c;Y3VybA==\\x07copr: enabling slp/mesa-libkrun-vulkan\\n")
sys.stderr.flush()
mode = os.environ.get("FAKE_PODMAN_MODE", "ok")
if mode == "hang":
    time.sleep(120)
if mode == "fail":
    print("Error: building at STEP \\"RUN dnf -y install\\": exit status 1", flush=True)
    sys.exit(125)
print("COMMIT localhost/cgpu-venus-probe:latest", flush=True)
"""


@pytest.fixture
def fake_podman(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "podman"
    script.write_text(FAKE.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "podman.log"
    log.write_text("")
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "FAKE_PODMAN_LOG": str(log)}, log


def test_build_shows_the_output_live_and_names_the_image(run_cli, fake_podman):
    env, log = fake_podman
    code, out, err = run_cli("krunkit", "build-image", "--machine", "gpu-vm", env=env)
    assert code == 0, err
    assert out == "built localhost/cgpu-venus-probe:latest in podman machine gpu-vm\n"
    assert "STEP 1/6: FROM quay.io/fedora/fedora:44" in err and "COMMIT" in err
    assert "\x1b" not in err and "\\e]52;c;Y3VybA==\\x07copr" in err  # the build's output is outside input
    assert log.read_text().splitlines()[0] == "--connection gpu-vm build -t localhost/cgpu-venus-probe:latest"


def test_a_failed_build_repeats_its_last_lines(run_cli, fake_podman):
    env, _ = fake_podman
    code, out, err = run_cli("krunkit", "build-image", env={**env, "FAKE_PODMAN_MODE": "fail"})
    assert code == 1 and out == ""
    reason, _, tail = err.partition("cgpu krunkit build-image: podman build with podman failed (exit status 125)")
    assert "STEP 1/6" in reason  # live first
    assert "its last lines:" in tail and '  Error: building at STEP "RUN dnf -y install"' in tail


def test_a_build_past_its_timeout_is_stopped_with_nothing_left(run_cli, fake_podman):
    env, log = fake_podman
    (code, _, err), seconds = timed(
        lambda: run_cli("krunkit", "build-image", "--timeout", "2", env={**env, "FAKE_PODMAN_MODE": "hang"})
    )
    assert code == 1
    assert_within(seconds, 2 + 1, interpreter_run, "a hung build with --timeout 2")  # and run()'s 1 s for the pipes
    assert "no answer within 2 s; it was stopped" in err and "STEP 1/6" in err.split("its last lines:")[1]
    pid = int(log.read_text().splitlines()[1])
    assert not Path(f"/proc/{pid}").exists()


def test_no_podman_is_a_clear_error(run_cli, tmp_path):
    code, _, err = run_cli("krunkit", "build-image", env={"PATH": str(tmp_path)})
    assert code == 1 and "podman" in err and "not found" in err
