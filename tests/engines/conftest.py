"""Fixtures: real containerd and Docker Engine daemons, started once per test session where a test needs them.

Engines are those scripts/real_engines.py unpacked (`.ci/run` runs it); where a suite, root or the host's runc
is missing, or a daemon does not come up, the tests that need it skip with the reason.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engines import harness, specs
from tests.engines.specs import Outcome

SUITES = ("trixie", "sid")
CDI_SETTINGS = (True, None, False)  # on, left to the engine's default, off


def setting_id(cdi: bool | None) -> str:
    return {True: "cdi-on", None: "cdi-default", False: "cdi-off"}[cdi]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "real_engines" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.engines)
            item.add_marker(pytest.mark.slow)


class RealEngines:
    """This session's dir, specs, images and daemons (started on first use, each once)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.session = harness.Session(home)
        self.spec_dir = home / "cdi"
        self.payload = home / "payload"
        self.payload.write_text("mounted by the 0.4.0 spec\n")
        specs.write_specs(self.spec_dir, self.payload)
        self._images: tuple[Path, Path] | None = None
        self._daemons: dict[tuple[str, str, bool | None], Any] = {}
        self._failures: dict[tuple[str, str, bool | None], str] = {}
        self._stubs: Any = None
        self.measured: dict[tuple[str, str, bool | None], dict[str, Outcome]] = {}

    def suite(self, name: str) -> harness.Suite:
        found, reason = harness.suite(name)
        if found is None:
            pytest.skip(reason)
        return found

    def images(self) -> tuple[Path, Path]:
        """(rootfs tar for `docker import`, OCI archive for `ctr images import`)."""
        if self._images is None:
            busybox, reason = harness.busybox()
            if busybox is None:
                pytest.skip(reason)
            rootfs = harness.rootfs_tar(busybox, self.home / "rootfs.tar")
            self._images = rootfs, harness.oci_archive(rootfs, self.home / "oci.tar")
        return self._images

    def _start(self, key: tuple[str, str, bool | None], daemon: Any, *args: Any) -> Any:
        if key in self._failures:
            pytest.skip(self._failures[key])
        if key not in self._daemons:
            try:
                daemon.start(*args)
            except Exception as exc:
                what = f"{key[1]} of {key[0]} ({setting_id(key[2])})"
                self._failures[key] = f"{what} did not come up: {exc}\n{daemon.log()}"
                pytest.skip(self._failures[key])
            self._daemons[key] = daemon
        return self._daemons[key]

    def containerd(self, suite: str, cdi: bool | None) -> harness.Containerd:
        key = (suite, "containerd", cdi)
        if key in self._daemons:
            return self._daemons[key]  # type: ignore[no-any-return]
        found = self.suite(suite)
        _rootfs, oci = self.images()
        daemon = harness.Containerd(found, self.home / f"{suite[:2]}-c{setting_id(cdi)[4:6]}", cdi, self.spec_dir)
        self.session.containerds.append(daemon)
        return self._start(key, daemon, oci)  # type: ignore[no-any-return]

    def dockerd(self, suite: str, cdi: bool | None) -> harness.Dockerd:
        key = (suite, "dockerd", cdi)
        if key in self._daemons:
            return self._daemons[key]  # type: ignore[no-any-return]
        containerd = self.containerd(suite, True)
        rootfs, _oci = self.images()
        home = self.home / f"{suite[:2]}-d{setting_id(cdi)[4:6]}"
        daemon = harness.Dockerd(containerd.suite, containerd, home, cdi, self.spec_dir)
        self.session.dockerds.append(daemon)
        return self._start(key, daemon, rootfs)  # type: ignore[no-any-return]

    def stubs(self) -> Any:
        if self._stubs is None:
            proto, reason = harness.cri_proto()
            if proto is None:
                pytest.skip(reason)
            pytest.importorskip("grpc_tools", reason="grpcio-tools is a dev dependency: uv sync")
            from tests.engines import cri

            self._stubs = cri.generate_stubs(proto, self.home / "stubs")
        return self._stubs

    def cri(self, suite: str, cdi: bool | None) -> Any:
        from tests.engines import cri

        containerd = self.containerd(suite, cdi)
        pb, pb_grpc = self.stubs()
        return cri.CRI(containerd.socket, pb, pb_grpc)

    # --- what each engine does with each spec -----------------------------------------------------------

    def docker_outcome(self, dockerd: harness.Dockerd, device: str, marker: str) -> Outcome:
        done = dockerd.docker("run", "--rm", "--network", "none", "--device", device, harness.IMAGE, "env", timeout=120)
        out = harness.text(done)
        if done.returncode == 0:
            return Outcome(marker in out, out if marker not in out else "")
        return Outcome(False, out)

    def cri_outcome(self, client: Any, sandbox: Any, device: str, marker: str, *, annotation: bool) -> Outcome:
        import grpc

        try:
            if annotation:
                container = client.create_container(
                    sandbox, harness.IMAGE, annotations={"cdi.k8s.io/cgpu-test": device}
                )
            else:
                container = client.create_container(sandbox, harness.IMAGE, cdi_devices=[device])
        except grpc.RpcError as exc:
            return Outcome(False, str(exc.details()))
        env = client.runtime_spec(container).get("process", {}).get("env", [])
        client.runtime.RemoveContainer(client.pb.RemoveContainerRequest(container_id=container), timeout=60)
        return Outcome(marker in env, "" if marker in env else "created without the device's edits")

    def docker_measure(self, suite: str, cdi: bool | None) -> dict[str, Outcome]:
        key = (suite, "dockerd", cdi)
        if key not in self.measured:
            dockerd = self.dockerd(suite, cdi)
            outcomes = {v: self.docker_outcome(dockerd, specs.device_name(v), specs.marker(v)) for v in specs.VERSIONS}
            outcomes["unknown"] = self.docker_outcome(dockerd, specs.UNKNOWN_DEVICE, "no marker")
            self.measured[key] = outcomes
        return self.measured[key]

    def cri_measure(self, suite: str, cdi: bool | None, *, annotation: bool = False) -> dict[str, Outcome]:
        key = (suite, "containerd-annotation" if annotation else "containerd", cdi)
        if key not in self.measured:
            client = self.cri(suite, cdi)
            try:
                sandbox = client.run_pod_sandbox()
                outcomes = {
                    v: self.cri_outcome(client, sandbox, specs.device_name(v), specs.marker(v), annotation=annotation)
                    for v in specs.VERSIONS
                }
                outcomes["unknown"] = self.cri_outcome(
                    client, sandbox, specs.UNKNOWN_DEVICE, "no marker", annotation=annotation
                )
            finally:
                client.close()
            self.measured[key] = outcomes
        return self.measured[key]

    def close(self) -> None:
        self.session.close()


@pytest.fixture(scope="session")
def real_engines() -> Iterator[RealEngines]:
    # A short path of its own (unix socket paths are limited to 108 bytes), unique per session: two test
    # sessions at once on one host each have their own daemons.
    home = Path(tempfile.mkdtemp(prefix="cgpu-e-", dir="/tmp"))
    engines = RealEngines(home)
    try:
        yield engines
    finally:
        engines.close()
        left = harness.pids_mentioning(str(home))
        shutil.rmtree(home, ignore_errors=True)
        assert not left, f"processes of this session's engines still running: {left}"
