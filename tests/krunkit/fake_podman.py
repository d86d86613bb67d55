#!/usr/bin/env python3
"""Stand-in for `podman` on a Mac, for `podman machine ...` ONLY (there is no macOS here, and
`podman machine` refuses to run as root); every other subcommand is handed to the real podman
unchanged, so images and containers go through the real engine.

FAKE_PODMAN_MACHINES: a JSON file, a list of {"Name", "VMType", "Running", "Default", "Socket"};
"Socket" is the machine's API socket (the tests point it at a real `podman system service`).
FAKE_PODMAN_OLD=1 plays a podman older than 5.3, which lacks `machine list --all-providers`.
FAKE_PODMAN_REAL: the real podman.
"""

from __future__ import annotations

import json
import os
import sys


def machines() -> list[dict]:
    with open(os.environ["FAKE_PODMAN_MACHINES"]) as f:
        return json.load(f)


def machine(args: list[str]) -> int:
    if args[:1] == ["list"] or args[:1] == ["ls"]:
        flags = args[1:]
        if "--all-providers" in flags and os.environ.get("FAKE_PODMAN_OLD"):
            sys.stderr.write("Error: unknown flag: --all-providers\nSee 'podman machine list --help'\n")
            return 125
        if flags[:2] != ["--format", "json"]:
            sys.stderr.write("this stand-in only answers `machine list --format json`\n")
            return 125
        rows = [
            {
                "Name": m["Name"],
                "Default": m.get("Default", False),
                "Created": "2 days ago",
                "Running": m.get("Running", False),
                "Starting": False,
                "LastUp": "Currently running",
                "Stream": "default",
                "VMType": m["VMType"],
                "CPUs": 4,
                "Memory": "4GiB",
                "DiskSize": "100GiB",
                "Port": 50123,
                "RemoteUsername": "core",
                "IdentityPath": "/Users/me/.local/share/containers/podman/machine/machine",
                "UserModeNetworking": True,
            }
            for m in machines()
        ]
        print(json.dumps(rows, indent=4))
        return 0
    if args[:1] == ["inspect"]:
        names = args[1:] or ["podman-machine-default"]
        found = {m["Name"]: m for m in machines()}
        out = []
        for name in names:
            if name not in found:
                sys.stderr.write(f"Error: {name}: VM does not exist\n")
                return 125
            m = found[name]
            out.append(
                {
                    "ConfigDir": {"Path": "/Users/me/.config/containers/podman/machine/libkrun"},
                    "ConnectionInfo": {"PodmanSocket": {"Path": m["Socket"]}, "PodmanPipe": None},
                    "Created": "2026-11-27T10:00:00Z",
                    "LastUp": "2026-11-29T09:00:00Z",
                    "Name": name,
                    "Resources": {"CPUs": 4, "DiskSize": 100, "Memory": 4096, "USBs": []},
                    "SSHConfig": {
                        "IdentityPath": "/Users/me/.local/share/containers/podman/machine/machine",
                        "Port": 50123,
                        "RemoteUsername": "core",
                    },
                    "State": "running" if m.get("Running") else "stopped",
                    "UserModeNetworking": True,
                    "Rootful": False,
                }
            )
        print(json.dumps(out, indent=4))
        return 0
    sys.stderr.write(f"this stand-in does not know `podman machine {' '.join(args[:1])}`\n")
    return 125


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["machine"]:
        sys.exit(machine(argv[1:]))
    real = os.environ["FAKE_PODMAN_REAL"]
    os.execv(real, [real, *argv])
