"""`--verify` faults against real podman: the service dies mid-call, Ctrl-C while a probe
container runs, an engine that is missing or never answers. Nothing may stay behind: no
container this run labelled, no podman service, no socket folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cgpu.engines.client import CLEANUP_S
from tests.conftest import VERIFY_FILTER
from tests.faults.conftest import STOPS, hung, marked_processes
from tests.timing import allowed, assert_within, timed, wait_for
from tests.verify.conftest import babbling_image, cdi_spec, podman, private_spec_dir, stand_in_image  # noqa: F401 - fixtures
from tests.verify.test_verify import _lvp_spec

pytestmark = pytest.mark.podman


@pytest.fixture
def device(cdi_spec, tmp_path):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (.ci/run installs podman, runc and busybox-static)")
    return f"{cdi_spec(_lvp_spec(tmp_path))}=dev0"


def _probe_containers(image: str, *flags: str) -> list[str]:
    """Containers this run labelled, from this test's image (other runs on the host have their own)."""
    return podman("ps", *flags, "-q", "--filter", VERIFY_FILTER, "--filter", f"ancestor={image}").stdout.split()


def _probe_container_running(image: str) -> bool:
    return bool(_probe_containers(image))


@pytest.fixture
def no_new_containers(stand_in_image):
    yield
    left = _probe_containers(stand_in_image, "-a")
    if left:
        podman("rm", "-f", *left)
    assert not left, f"containers left behind: {left}"


def _service(cli) -> list[int]:
    return [int(line.split(":")[0]) for line in marked_processes(cli.mark) if "system service" in line]


def test_the_service_dies_mid_call(cli, device, stand_in_image, no_new_containers):
    """The podman service cgpu started is killed while the probe container runs: the device's
    check fails with the engine named, the run still answers, and the container is removed
    through the CLI."""
    proc = cli.popen(
        "probe",
        "--backend",
        "cdi",
        "--json",
        "--verify",
        "--device",
        device,
        "--probe-image",
        stand_in_image,
        "--timeout",
        "120",
    )
    try:
        wait_for(
            lambda: proc.poll() is not None or _probe_container_running(stand_in_image),
            within=120,
            what="the probe container to run",
        )
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"cgpu ended before the probe container ran: {err[-2000:]!r} {out[-3000:]!r}")
        [service] = _service(cli)
        os.kill(service, signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=90)
        cleanup_s = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert b"Traceback" not in err, err
    assert proc.returncode == 0, err
    report = json.loads(out)
    [entry] = report["devices"]
    assert entry["live_status"] == "failed"
    [error] = [p for p in report["problems"] if p["source"] == device]
    assert "podman 4" in error["message"] or "podman 5" in error["message"], error
    assert "no answer from the podman API" in error["message"], error
    assert not _probe_container_running(stand_in_image)
    # the engine's cleanup budget plus the CLI fallback's own second, never podman's 10 s stop timeout
    assert_within(
        cleanup_s,
        CLEANUP_S + 1,
        lambda: timed(lambda: podman("rm", "--force", "--time", "0", f"cgpu-no-such-{uuid.uuid4().hex}"))[1],
        "removing the container through the CLI (did it wait for a stop timeout?)",
    )


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_during_the_probe_container(
    cli,
    device,
    stand_in_image,
    no_new_containers,
    signum,
    status,
    said,
):
    code, out, err = cli.interrupt_when(
        lambda: _probe_container_running(stand_in_image),
        "probe",
        "--backend",
        "cdi",
        "--verify",
        "--device",
        device,
        "--probe-image",
        stand_in_image,
        signum=signum,
    )
    assert code == status and said in err
    assert not _probe_container_running(stand_in_image)


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_the_service_starts(cli, bin_dir, device, signum, status, said):
    """A podman whose `system service` never opens its socket: Ctrl-C stops it, and its socket folder goes."""
    real = cli.env["PATH"].split(os.pathsep, 1)[1]
    (bin_dir / "podman").write_text(
        f'#!/bin/sh\ncase "$*" in *"system service"*) exec sleep 600;; esac\nPATH="{real}" exec podman "$@"\n'
    )
    (bin_dir / "podman").chmod(0o755)
    code, _, err = cli.interrupt_when(
        lambda: cli.running("sleep 600"), "probe", "--backend", "cdi", "--verify", "--device", device, signum=signum
    )
    assert code == status and said in err


def _process_tree_of(marker: str) -> dict[int, str]:
    """The live process whose command line is `sleep MARKER` and its ancestors up to the
    first one that is not conmon or the OCI runtime: pid -> command line."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _cmdline(int(entry)) == f"sleep {marker}":
            pid = int(entry)
            while pid > 1 and (found == {} or any(n in _cmdline(pid) for n in ("conmon", "runc"))):
                found[pid] = _cmdline(pid)
                pid = _parent(pid)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; only its parent's wait is missing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _hooked_run(
    cli, cdi_spec, image: str, hook: str, limit: int
) -> tuple[float, dict[int, str], Any, bytes, bytes, str]:
    """`--verify --timeout LIMIT` of a device whose `hook` sleeps 10 minutes past the limit: the seconds it
    took, the processes seen with the sleep's command line, the process and its output, and the spec's kind."""
    marker = f"{limit + 600}.{uuid.uuid4().int % 10**9}"  # the sleep's command line is this run's
    kind = cdi_spec(
        "devices:\n  - name: dev0\n    containerEdits:\n      hooks:\n"
        f"        - {{hookName: {hook}, path: /bin/sleep, args: [sleep, '{marker}']}}\n"
    )
    started = time.monotonic()
    proc = cli.popen(
        "probe", "--backend", "cdi", "--json", "--verify", "--device", f"{kind}=dev0",
        "--probe-image", image, "--timeout", str(limit),
    )  # fmt: skip
    seen: dict[int, str] = {}
    try:
        while proc.poll() is None and time.monotonic() - started < limit + 60:
            seen.update(_process_tree_of(marker))
            time.sleep(0.1)  # a look at the process tree every 0.1 s while cgpu runs
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return time.monotonic() - started, seen, proc, out, err, kind


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["createContainer", "startContainer"])  # run by `runc create`, `runc start`
def test_a_hung_cdi_hook_ends_at_the_timeout(cli, cdi_spec, stand_in_image, babbling_image, no_new_containers, hook):
    """A CDI hook that sleeps past the limit: `--verify --timeout LIMIT` ends within LIMIT + 2 s (on a busy
    host: plus twice what the same run takes with a device that has no hook, a probe that exits at
    once), and the container, its conmon, `runc` and the hook are gone (a forced remove alone left
    conmon and `runc init`). The limit is long enough for that baseline run three times over; where a host
    busy with another suite's podman runs (they hold its storage lock) used it up before the container was
    made, the run is measured again with twice the limit (at most twice), so that the hook is reached."""
    plain = cdi_spec("devices:\n  - name: dev0\n    containerEdits:\n      env: [CGPU_TEST=1]\n")
    (code, _, err), baseline = timed(
        lambda: cli(
            "probe", "--backend", "cdi", "--json", "--verify", "--device", f"{plain}=dev0",
            "--probe-image", babbling_image, "--timeout", "120",
        )
    )  # fmt: skip
    assert code == 0, err
    limit = max(15, round(3 * baseline))
    for _ in range(3):  # a host busy with another suite's podman (its storage lock) may use a limit up first
        took, seen, proc, out, err, kind = _hooked_run(cli, cdi_spec, stand_in_image, hook, limit)
        assert took < allowed(limit, baseline), f"{took:.1f} s with --timeout {limit}; {baseline:.1f} s with no hook"
        if any(line.startswith("sleep") for line in seen.values()) or b"used up" not in out:
            break
        limit *= 2  # the limit ran out before the container was made: the hook is still to be reached
    LIMIT = limit
    assert any(line.startswith("sleep") for line in seen.values()), (
        f"the hook never ran: {err[-2000:]!r} {out[-3000:]!r}"
    )
    assert any("conmon" in line for line in seen.values()) and any("runc" in line for line in seen.values()), seen
    assert proc.returncode == 0, err
    report = json.loads(out)
    [entry] = report["devices"]
    assert entry["live_status"] == "failed" and entry["live_seconds"] < allowed(LIMIT, baseline)
    [error] = [p for p in report["problems"] if p["source"] == f"{kind}=dev0" and p["severity"] == "error"]
    assert "the container did not start within" in error["message"], error  # podman's start waits for the hook
    assert "killed and removed" in error["message"], error

    def left() -> list[str]:
        return [f"{pid}: {line}" for pid, line in seen.items() if _running(pid)]

    wait_for(lambda: not left(), within=10, what=f"SIGKILLed processes to end (it lands asynchronously): {left()}")


@pytest.mark.parametrize(
    "variable, engine, why",
    [
        ("CONTAINER_HOST", "auto", "podman-py waits a fixed 300 s for its ssh tunnel"),
        ("CONTAINER_HOST", "podman@4.3.1", "StrictHostKeyChecking=no"),
        ("DOCKER_HOST", "docker@28.2.0", "docker-py's ssh transport"),
    ],
)
def test_an_ssh_engine_url_is_refused_with_the_reason(cli, bin_dir, device, variable, engine, why):
    """podman-py would wait 300 s for its ssh tunnel (with --timeout 5) and skip host key
    checks: cgpu refuses the URL at once, starts no ssh, and the static answer stands. An
    `ssh` that records being run proves it is never started."""
    (bin_dir / "ssh").write_text(f"#!/bin/sh\ntouch {bin_dir}/ssh-ran\nexec sleep 600\n")
    (bin_dir / "ssh").chmod(0o755)
    # The baseline: the same probe without --verify, measured before and after the run and the longer
    # counting (beside a second suite at load 12, one measure after the run allowed 5 + 2 x 1.9 s while
    # the run, caught in a burst, took 8.9 s)
    static = ("probe", "--backend", "cdi", "--json", "--device", device, "--engine", engine)  # no --verify
    before = timed(lambda: cli(*static))[1]
    (code, out, _), seconds = timed(
        lambda: cli(
            "probe", "--backend", "cdi", "--json", "--verify", "--device", device, "--engine", engine, "--timeout", "5",
            env={variable: "ssh://cgpu@127.0.0.1:1/run/podman/podman.sock"},
        )
    )  # fmt: skip
    assert_within(seconds, 5, lambda: max(before, timed(lambda: cli(*static))[1]), "refusing an ssh engine URL")
    assert code == 0 and not (bin_dir / "ssh-ran").exists()
    [error] = [p for p in json.loads(out)["problems"] if p["source"] == "--verify"]
    assert f"{variable} is an ssh URL (ssh://cgpu@127.0.0.1:1/run/podman/podman.sock)" in error["message"], error
    assert why in error["message"] and f"{variable}=unix://" in error["message"], error


def test_no_engine_at_all(cli, bin_dir, device):
    """No podman, no Docker: the static answer stands and --verify says why it could not run."""
    code, out, _ = cli(
        "probe",
        "--backend",
        "cdi",
        "--json",
        "--verify",
        "--device",
        device,
        env={"PATH": f"{bin_dir}:/usr/bin/nonexistent", "DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    report = json.loads(out)
    assert code == 0
    [error] = [p for p in report["problems"] if p["source"] == "--verify"]
    assert error["severity"] == "error" and "no container engine answered" in error["message"]


def test_an_engine_that_never_answers_is_bounded_by_timeout(cli, bin_dir, device):
    """`--timeout` bounds all of --verify, connecting included (finding podman's socket, starting
    its service, asking Docker), not only the probe container: with a podman that never answers
    the run ends within the timeout plus 2 s (it took 60 s, then 7.5 s, one limit per call)."""
    hung(bin_dir, "podman")
    verify = ("probe", "--backend", "cdi", "--json", "--verify", "--device", device, "--timeout", "2")
    (code, out, _), seconds = timed(lambda: cli(*verify, env={"DOCKER_HOST": "unix:///nonexistent.sock"}, timeout=100))
    report = json.loads(out)
    assert code == 0
    [error] = [p for p in report["problems"] if p["source"] == "--verify"]
    assert error["severity"] == "error" and "no container engine answered" in error["message"], error
    said = ("no answer within", "no socket after", "the run's time limit was used up before")
    assert any(words in error["message"] for words in said), error
    static = ("probe", "--backend", "cdi", "--json", "--device", device)
    assert_within(seconds, 2, lambda: timed(lambda: cli(*static))[1], f"a hung engine with --timeout 2: {error}")


def _fault_image_ref(version: str = "0-cgpu-fault") -> str:
    """The probe image cgpu would build from the packages `_fake_dpkg_query` names."""
    from cgpu.backends.cdi.probe_image import OPTIONAL, REQUIRED, image_ref, python_packages

    return image_ref(dict.fromkeys(python_packages() + REQUIRED + OPTIONAL, version))


def _fake_dpkg_query(bin_dir, *, listing: str, version: str = "0-cgpu-fault") -> None:
    """A `dpkg-query` that names every package at a version no image was built from (so cgpu
    builds one) and runs `listing` when asked for their files; other questions (podman asks too,
    for its own version report) go to the real one."""
    real = shutil.which("dpkg-query")
    if real is None:
        pytest.skip("dpkg-query is not installed: the probe image is built from Debian packages")
    (bin_dir / "dpkg-query").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -W ]; then shift 3; for p in "$@"; do printf "%s\\t{version}\\tinstalled\\n" "$p"; done;'
        " exit 0; fi\n"
        f'if [ "$1" = -L ]; then {listing}; fi\n'
        f'exec {real} "$@"\n'
    )
    (bin_dir / "dpkg-query").chmod(0o755)


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_the_probe_image_is_built(cli, bin_dir, device, signum, status, said):
    """A `dpkg-query` that names packages of versions no image was built from (so cgpu builds
    one) and then hangs listing their files: Ctrl-C stops the build, the service and removes
    the build's temp folder."""
    _fake_dpkg_query(bin_dir, listing="exec sleep 600")
    code, _, err = cli.interrupt_when(
        lambda: cli.running("sleep 600"), "probe", "--backend", "cdi", "--verify", "--device", device, signum=signum
    )
    assert code == status and said in err
    assert "building the probe image localhost/cgpu-probe:" in err


def test_a_package_listing_that_fails_builds_no_image(cli, bin_dir, device):
    """`dpkg-query -L` fails: no probe image is made (it would be kept and reused under the
    packages' versions), and --verify says why."""
    _fake_dpkg_query(bin_dir, listing="echo \"dpkg-query: package 'libc6' is not installed\" >&2; exit 1")
    ref = _fault_image_ref()  # only this one: another run on the host may build the real probe image meanwhile
    try:
        code, out, _ = cli("probe", "--backend", "cdi", "--json", "--verify", "--device", device)
    finally:
        made = podman("image", "exists", ref).returncode == 0
        if made:
            podman("rmi", "-f", ref)
    assert not made
    report = json.loads(out)
    assert code == 0
    [error] = [p for p in report["problems"] if p["source"] == "--verify"]
    assert "`dpkg-query -L` failed (exit 1): dpkg-query: package 'libc6' is not installed" in error["message"]


def test_concurrent_first_runs_build_the_probe_image_once(cli, bin_dir, device):
    """Three `--verify` runs at once on a host without the probe image: one builds it (under
    the lock in the cache dir), the others wait and reuse it; no untagged image is left. The
    stand-in packages list one small program, so the image is small and its version unique."""
    version = f"0-cgpu-lock-{uuid.uuid4().hex[:8]}"
    _fake_dpkg_query(bin_dir, listing="echo /usr/bin/true; exit 0", version=version)
    dangling_before = set(podman("images", "-q", "--no-trunc", "--filter", "dangling=true").stdout.split())
    ref = _fault_image_ref(version)  # this test's image only: another suite on the host may build its own
    procs = [
        cli.popen("probe", "--backend", "cdi", "--verify", "--device", device, "--timeout", "60") for _ in range(3)
    ]
    try:
        results = [cli._collect(proc, 120) for proc in procs]
    finally:
        made = set(podman("images", "-q", "--no-trunc", ref).stdout.split())
        ours = [
            image
            for image in set(podman("images", "-q", "--no-trunc", "--filter", "dangling=true").stdout.split())
            - dangling_before
            if _built_from_true(image)
        ]
        if made or ours:
            podman("rmi", "-f", *made, *ours)
    assert [code for code, _, _ in results] == [0, 0, 0], [err[-1000:] for _, _, err in results]
    builds = [err for _, _, err in results if "cgpu: building the probe image localhost/cgpu-probe:" in err]
    assert len(builds) == 1, [err[-1000:] for _, _, err in results]
    assert len(made) == 1 and not ours, (made, ours)


def _built_from_true(image: str) -> bool:
    """An image made by the stand-in packages above: one small layer holding /usr/bin/true."""
    size = podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip()
    return (
        size.isdigit()
        and int(size) < 20_000_000
        and "/usr/bin/python3" in podman("image", "inspect", "--format", "{{.Config.Cmd}}", image).stdout
    )
