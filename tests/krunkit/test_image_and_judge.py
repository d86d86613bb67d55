"""The Venus probe image's Containerfile (CI cannot build it: no registry, no aarch64 Mac), the
guest script's contract, and judging arbitrary probe output without ever crashing."""

from __future__ import annotations

import json
import re
import shlex

from hypothesis import given
from hypothesis import strategies as st

from cgpu.backends.krunkit import ProbeFailed, judge
from cgpu.backends.krunkit.vm import VM_DEFAULTS
from cgpu.gpu_probe.answer import ProbeAnswer
from cgpu.run import Completed
from tests.conftest import REPO

CONTAINERFILE = REPO / "krunkit" / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_containerfile_pins_the_libkrun_mesa_build():
    steps = instructions()
    assert {w for w, _ in steps} <= {"FROM", "ARG", "RUN", "COPY", "LABEL", "ENTRYPOINT", "ENV"}
    assert steps[0] == ("FROM", "quay.io/fedora/fedora:44")
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG")
    pin = args["MESA_LIBKRUN_VR"]
    assert re.fullmatch(r"\d+\.\d+\.\d+-1\d\d\.fc44", pin), pin  # copr builds carry release 100+
    run = " ".join(a for w, a in steps if w == "RUN")
    commands = [shlex.split(c) for c in run.split("&&")]
    assert ["dnf", "-y", "copr", "enable", "slp/mesa-libkrun-vulkan"] in commands
    install = next(c for c in commands if c[:3] == ["dnf", "-y", "install"] and "vulkan-loader" in c)
    assert "mesa-vulkan-drivers-${MESA_LIBKRUN_VR}" in install and "python3" in install
    assert ["dnf", "versionlock", "add", "mesa-vulkan-drivers-${MESA_LIBKRUN_VR}"] in commands
    # copr before the install, versionlock after it; the build fails if stock Mesa slipped in
    assert run.index("copr enable") < run.index("mesa-vulkan-drivers-${") < run.index("versionlock add")
    assert "rpm -q --qf '%{VERSION}-%{RELEASE}' mesa-vulkan-drivers" in run
    # cgpu runs its own probe with the image's python3: no stale copy of it, no entry point
    assert not {"COPY", "ENTRYPOINT", "CMD"} & {w for w, _ in steps}


def test_guest_script_matches_what_the_host_waits_for():
    script = (REPO / "krunkit" / "guest" / "cgpu-probe.sh").read_text()
    assert f"mount -t virtiofs {VM_DEFAULTS['results_tag']} " in script
    assert f"VSOCK-CONNECT:2:{VM_DEFAULTS['ready_vsock_port']}" in script
    assert "--device /dev/dri" in script
    # cgpu's probe from the share, run by the image's python3, never the image's entry point
    assert '--volume "$mnt/probe.py:/cgpu-probe.py:ro" --entrypoint python3' in script
    assert '"$image" /cgpu-probe.py' in script
    assert script.index("probe.out") < script.index('mv "$mnt/probe.rc.tmp" "$mnt/probe.rc"')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "apis",
                    "vulkan",
                    "devices",
                    "name",
                    "counted",
                    "allocated",
                    "type",
                    "driver_id",
                    "driver_name",
                    "error",
                    "library",
                    "reason",
                    "x",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=25,
)


@given(
    st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode())),
    st.integers(-20, 255),
    st.binary(max_size=100),
)
def test_judge_never_crashes(stdout, returncode, stderr):
    try:
        answer = judge(Completed(["probe"], returncode, stdout, stderr), where="the VM", image="img")
    except ProbeFailed as exc:
        assert exc.message
        return
    vulkan = answer.apis["vulkan"]
    assert set(answer.apis) == {"vulkan"} and vulkan.state in ("provided", "absent") and vulkan.evidence
    assert ProbeAnswer.from_json(json.loads(json.dumps(answer.to_json()))) == answer  # cacheable
    if vulkan.state == "provided":
        assert any(d.counted for d in vulkan.devices)
    else:
        assert answer.problems and answer.problems[0].severity == "error"


def _judge(stdout: str, returncode: int = 0, stderr: bytes = b""):
    return judge(Completed(["probe"], returncode, stdout.encode(), stderr), where="the VM", image="img")


def test_judge_reads_the_probe_through_the_local_checker():
    from tests.krunkit.test_machine import VENUS, VENUS_NO_ALLOCATION, probe_output

    answer = _judge(probe_output(VENUS_NO_ALLOCATION))
    assert "VK_ERROR_MEMORY_MAP_FAILED" in answer.problems[0].message
    hostile = {**VENUS, "name": "Virtio-GPU Venus\x1b[2J (Apple M4)\n" + "x" * 5000}
    answer = _judge(probe_output(hostile))
    assert answer.provided == ["vulkan"]
    name = answer.devices[0].name
    assert "\x1b" not in name and "\n" not in name and len(name) <= 200
    newer = json.loads(probe_output(VENUS))
    newer["probe_version"] = 2
    try:
        _judge(json.dumps(newer))
    except ProbeFailed as exc:
        assert "version 2" in exc.message
    else:
        raise AssertionError("a probe of another version must not be read")


def test_a_probe_that_got_no_answer_is_not_a_verdict():
    from tests.krunkit.test_machine import probe_output

    for code in ("no_ctypes", "timeout", "crashed"):
        try:
            _judge(probe_output(error=code, library=None))
        except ProbeFailed as exc:
            assert f"({code})" in exc.message
        else:
            raise AssertionError(f"{code} must not read as 'no Vulkan'")
