#!/usr/bin/env python3
"""Stand-in for `krunkit` (there is no macOS here): parses krunkit 1.2's real command line
and behaves like a booting VM.

Flags as in containers/krunkit `src/cmdline.rs`: unknown ones are refused as clap refuses them
(exit 2), `--memory` above 61440 MiB is refused, `--version` prints `krunkit 1.2.1`.
`FAKE_KRUNKIT_UNKNOWN` (comma-separated flags) plays an older krunkit that lacks them.

The "disk" (`--device virtio-blk,path=DISK`, the first one) is a JSON file describing the guest:
  boot_s      seconds until the guest says Ready on the ready vsock socket
  behaviour   ready | hang (never ready) | exit-early (exits 1 before ready, like a failed
              krun_start_enter) | crash (SIGABRT after ready) | no-answer (ready, writes nothing)
  probe       {"rc": 0, "out": "...", "err": "..."}: the guest's probe run, written to the
              virtio-fs share as podman run's output would be
  podman      {"exe": "/usr/bin/podman", "device": "/dev/null:/dev/dri/renderD128"}: instead of
              `probe`, run the share's probe.py with python3 in the image named in the share's
              request.json with the real podman, as the guest script krunkit/guest/cgpu-probe.sh does
Like krunkit it stops on `POST /vm/state` to its REST socket. It also starts one
child, so a test can see that the whole process group goes away.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

FLAGS_WITH_VALUE = {
    "--cpus": "cpus",
    "-c": "cpus",
    "--memory": "memory",
    "-m": "memory",
    "--device": "device",
    "--bootloader": "bootloader",
    "--firmware-path": "firmware",
    "-f": "firmware",
    "--restful-uri": "restful_uri",
    "--log-file": "log_file",
    "--krun-log-level": "log_level",
    "--pidfile": "pidfile",
    "--timesync": "timesync",
    "--oem-string": "oem",
}
FLAGS_BOOL = {"--nested", "-n", "--gui"}
USAGE = "Usage: krunkit [OPTIONS] --cpus <CPUS> --memory <MEMORY>\n\nFor more information, try '--help'.\n"


def clap_error(message: str) -> None:
    sys.stderr.write(f"error: {message}\n\n{USAGE}")
    sys.exit(2)


def parse(argv: list[str]) -> dict:
    unknown = {f for f in os.environ.get("FAKE_KRUNKIT_UNKNOWN", "").split(",") if f}
    opts: dict = {"device": []}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--version", "-V"):
            print("krunkit 1.2.1")
            sys.exit(0)
        if arg in unknown or (arg not in FLAGS_WITH_VALUE and arg not in FLAGS_BOOL):
            clap_error(f"unexpected argument '{arg}' found")
        if arg in FLAGS_BOOL:
            i += 1
            continue
        if i + 1 >= len(argv):
            clap_error(f"a value is required for '{arg}' but none was supplied")
        key = FLAGS_WITH_VALUE[arg]
        if key == "device":
            opts["device"].append(argv[i + 1])
        else:
            opts[key] = argv[i + 1]
        i += 2
    for required in ("cpus", "memory"):
        if required not in opts:
            clap_error(f"the following required arguments were not provided:\n  --{required} <{required.upper()}>")
    if not opts["cpus"].isdigit() or int(opts["cpus"]) < 1:
        print("Error: vcpus must be a minimum of 1", file=sys.stderr)
        sys.exit(1)
    memory = int(opts["memory"].rstrip("Mm"))
    if memory > 61440:
        print("Error: requested RAM larger than upper limit of 61440 MiB", file=sys.stderr)
        sys.exit(1)
    devices = {}
    for spec in opts["device"]:
        kind, _, rest = spec.partition(",")
        if kind not in (
            "virtio-blk",
            "virtio-net",
            "virtio-vsock",
            "virtio-fs",
            "virtio-serial",
            "virtio-rng",
            "virtio-gpu",
            "virtio-input",
        ):
            print(f"Error: unknown device type: {kind}", file=sys.stderr)
            sys.exit(1)
        fields = dict(p.partition("=")[::2] for p in rest.split(",") if p)
        if kind == "virtio-gpu" and not ("width" in fields and "height" in fields):
            print("Error: virtio-gpu needs width and height", file=sys.stderr)
            sys.exit(1)
        devices.setdefault(kind, fields)
    return {**opts, "devices": devices}


def log(opts: dict, line: str) -> None:
    if "log_file" in opts:
        with open(opts["log_file"], "a") as f:  # krunkit appends
            f.write(line + "\n")


def console(opts: dict, line: str) -> None:
    path = opts["devices"].get("virtio-serial", {}).get("logFilePath")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def serve_rest(uri: str) -> None:
    """GET (anything but POST) says Running; POST /vm/state stops the VM."""
    path = uri.removeprefix("unix://")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def loop() -> None:
        while True:
            conn, _ = server.accept()
            request = conn.recv(4096)
            if request.startswith(b"POST"):
                body = b'{"state": "VirtualMachineStateStopping"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                conn.close()
                os._exit(0)
            body = b'{"state": "VirtualMachineStateRunning"}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            conn.close()

    threading.Thread(target=loop, daemon=True).start()


def guest_probe(guest: dict, shared: str) -> None:
    if "podman" in guest:
        request = json.load(open(os.path.join(shared, "request.json")))
        image = request.get("probe_image") or "localhost/cgpu-venus-probe:latest"
        with open(os.path.join(shared, "probe.out"), "wb") as out, open(os.path.join(shared, "probe.err"), "wb") as err:
            rc = subprocess.call(
                [
                    guest["podman"]["exe"],
                    "run",
                    "--rm",
                    "--pull=never",
                    "--network=none",
                    "--device",
                    guest["podman"]["device"],
                    "--volume",
                    f"{os.path.join(shared, 'probe.py')}:/cgpu-probe.py:ro",
                    "--entrypoint",
                    "python3",
                    image,
                    "/cgpu-probe.py",
                ],
                stdout=out,
                stderr=err,
                timeout=120,
            )
    else:
        probe = guest["probe"]
        open(os.path.join(shared, "probe.out"), "w").write(probe.get("out", ""))
        open(os.path.join(shared, "probe.err"), "w").write(probe.get("err", ""))
        rc = probe.get("rc", 0)
    open(os.path.join(shared, "probe.rc.tmp"), "w").write(f"{rc}\n")
    os.replace(os.path.join(shared, "probe.rc.tmp"), os.path.join(shared, "probe.rc"))


def main() -> None:
    opts = parse(sys.argv[1:])
    disk = opts["devices"].get("virtio-blk", {}).get("path")
    guest = json.load(open(disk)) if disk else {"behaviour": "hang"}
    log(opts, "[INFO  krunkit] starting the VM")
    # a child in the same process group: cgpu must end the whole group, not just krunkit
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if "restful_uri" in opts and opts["restful_uri"].startswith("unix://"):
        serve_rest(opts["restful_uri"])
    if "pidfile" in opts:
        open(opts["pidfile"], "w").write(f"{os.getpid()}\n")
    behaviour = guest.get("behaviour", "ready")
    time.sleep(guest.get("boot_s", 0.2))
    if behaviour == "exit-early":
        log(opts, "[ERROR krun] Building the microVM failed: Internal(Vm(VmSetup(VmCreate)))")
        print("Error: unable to begin running krun workload", file=sys.stderr)
        sys.exit(1)
    if behaviour == "hang":
        console(opts, "EFI stub: Booting Linux Kernel...")
        time.sleep(3600)
    console(opts, "Fedora Linux 44 (Container Image)")
    vsock = opts["devices"]["virtio-vsock"]
    ready = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ready.connect(vsock["socketURL"])
    ready.sendall(b"Ready\n")
    ready.close()
    if behaviour == "crash":
        log(opts, "[ERROR hvf] map_memory: err -85377021")
        os.kill(os.getpid(), signal.SIGABRT)
    if behaviour == "ready":
        guest_probe(guest, opts["devices"]["virtio-fs"]["sharedDir"])
        console(opts, "cgpu-probe: done, powering off")
    time.sleep(3600)


if __name__ == "__main__":
    main()
