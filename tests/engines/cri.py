"""A small CRI client: what the kubelet asks of containerd, as far as the CDI tests need it.

The stubs are generated at setup time from the CRI's api.proto (Debian's golang-k8s-cri-api-dev, fetched by
scripts/real_engines.py) with grpcio-tools, into a dir of the test session: nothing generated is committed.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

CALL_SECONDS = 60.0


def generate_stubs(proto: Path, out: Path) -> tuple[ModuleType, ModuleType]:
    """(api_pb2, api_pb2_grpc) generated from `proto` into `out`; RuntimeError when protoc fails."""
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(
        [
            "protoc",
            f"-I{proto.parent}",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(proto),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc could not compile {proto} (exit {code})")
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
    finally:
        sys.path.remove(str(out))


class CRI:
    """The CRI's RuntimeService on one containerd socket; every sandbox it ran is removed by `close`."""

    def __init__(self, socket: Path, pb: ModuleType, pb_grpc: ModuleType) -> None:
        import grpc

        self.pb = pb
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.runtime = pb_grpc.RuntimeServiceStub(self.channel)
        self.sandboxes: list[str] = []

    def version(self) -> Any:
        return self.runtime.Version(self.pb.VersionRequest(version="v1"), timeout=CALL_SECONDS)

    def run_pod_sandbox(self) -> tuple[str, Any]:
        """A pod on the host network (no CNI needed), a PID namespace per container, no hostname: as the
        kubelet asks for a hostNetwork pod."""
        pb = self.pb
        name = f"cgpu-{uuid.uuid4().hex[:8]}"
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uuid.uuid4().hex, namespace="cgpu", attempt=0),
            linux=pb.LinuxPodSandboxConfig(
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
                )
            ),
        )
        answer = self.runtime.RunPodSandbox(pb.RunPodSandboxRequest(config=config), timeout=CALL_SECONDS)
        self.sandboxes.append(answer.pod_sandbox_id)
        return answer.pod_sandbox_id, config

    def create_container(
        self,
        sandbox: tuple[str, Any],
        image: str,
        *,
        cdi_devices: list[str] = (),  # type: ignore[assignment]
        annotations: dict[str, str] | None = None,
    ) -> str:
        """CreateContainer with CDI devices in `CDI_devices` and/or `cdi.k8s.io/` annotations (the two ways
        the kubelet passes them); the container's id. A refusal raises grpc.RpcError (its details say why)."""
        pb = self.pb
        sandbox_id, sandbox_config = sandbox
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=f"c-{uuid.uuid4().hex[:8]}", attempt=0),
            image=pb.ImageSpec(image=image),
            command=["/bin/sleep", "2147483647"],
            annotations=annotations or {},
            CDI_devices=[pb.CDIDevice(name=n) for n in cdi_devices],
            linux=pb.LinuxContainerConfig(),
        )
        answer = self.runtime.CreateContainer(
            pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config),
            timeout=CALL_SECONDS,
        )
        return str(answer.container_id)

    def runtime_spec(self, container_id: str) -> dict[str, Any]:
        """The OCI spec containerd made for the container (what a CDI injection edited)."""
        import json

        answer = self.runtime.ContainerStatus(
            self.pb.ContainerStatusRequest(container_id=container_id, verbose=True), timeout=CALL_SECONDS
        )
        info = json.loads(answer.info["info"])
        return dict(info["runtimeSpec"])

    def close(self) -> None:
        for sandbox_id in self.sandboxes:
            request_stop = self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id)
            request_remove = self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id)
            try:
                self.runtime.StopPodSandbox(request_stop, timeout=CALL_SECONDS)
                self.runtime.RemovePodSandbox(request_remove, timeout=CALL_SECONDS)
            except Exception:  # the daemon is stopped next anyway; its shims are found by address
                pass
        self.sandboxes.clear()
        self.channel.close()
