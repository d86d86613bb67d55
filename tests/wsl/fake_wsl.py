"""A stand-in for Windows' wsl.exe, for tests on Linux.

It parses the command line as WslClient.cpp's WslMain does (`-d/--distribution NAME`,
`-u/--user NAME`, `--cd DIR`, then `-e/--exec ARGV...` or `-- COMMAND...`), prints its own
messages the way wsl.exe does (on stdout, CRLF, UTF-16LE unless WSL_UTF8=1, `Error code:
Wsl/...` lines, exit -1, which Linux shows as 255), and runs the command inside a distro:
a directory tree entered with chroot(2) (so it needs root), with the environment WSL gives a process. The Linux
process's exit status and raw output bytes pass through, as with the real one.

Its "registry" is a JSON file named by FAKE_WSL_STATE:
  {"installed": true, "default": "Ubuntu", "ignores_wsl_utf8": false,
   "distros": {"Ubuntu": {"root": "/path/to/tree", "version": 2}}}
"""

from __future__ import annotations

import json
import os
import sys

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/wsl/lib"
USAGE = (
    "Copyright (c) Microsoft Corporation. All rights reserved.\nUsage: wsl.exe [Argument] [Options...] [CommandLine]"
)


def say(state: dict, text: str, code: str | None = None) -> None:
    if code:
        text += f"\nError code: {code}"
    data = (text + "\n").replace("\n", "\r\n")
    utf8 = os.environ.get("WSL_UTF8") == "1" and not state.get("ignores_wsl_utf8")
    sys.stdout.buffer.write(data.encode("utf-8") if utf8 else data.encode("utf-16-le"))
    sys.stdout.buffer.flush()
    sys.exit(-1 & 0xFF)


def main(argv: list[str]) -> None:
    with open(os.environ["FAKE_WSL_STATE"], encoding="utf-8") as handle:
        state = json.load(handle)
    if not state.get("installed", True):
        say(
            state,
            "The Windows Subsystem for Linux is not installed. You can install by running "
            "'wsl.exe --install'.\nFor more information please visit https://aka.ms/wslinstall",
            "Wsl/WSL_E_WSL_OPTIONAL_COMPONENT_REQUIRED",
        )
    distro = None
    command: list[str] | None = None
    index = 0
    while index < len(argv):
        argument = argv[index]
        if argument in ("-d", "--distribution", "-u", "--user", "--cd"):
            if index + 1 >= len(argv):
                say(
                    state,
                    f"Command line argument {argument} requires a value.\nPlease use 'wsl.exe --help' "
                    "to get a list of supported arguments.",
                    "Wsl/E_INVALIDARG",
                )
            if argument in ("-d", "--distribution"):
                if distro is not None:
                    say(state, "The distribution has already been set.")
                distro = argv[index + 1]
            index += 2
            continue
        if argument in ("-e", "--exec"):
            command = argv[index + 1 :]
            if not command:
                say(state, "The parameter is incorrect.", "Wsl/E_INVALIDARG")
            break
        if argument == "--":
            command = ["/bin/sh", "-c", " ".join(argv[index + 1 :])]
            break
        if argument == "--help":
            say(state, USAGE)
        if argument.startswith("-"):
            say(
                state,
                f"Invalid command line argument: {argument}\nPlease use 'wsl.exe --help' to get a list "
                "of supported arguments.",
                "Wsl/E_INVALIDARG",
            )
        command = ["/bin/sh", "-c", " ".join(argv[index:])]
        break
    distros = state.get("distros", {})
    if distro is None:
        distro = state.get("default")
        if distro is None:  # wsl.exe prints no code for this one
            say(
                state,
                "Windows Subsystem for Linux has no installed distributions.\nYou can resolve this by "
                "installing a distribution with the instructions below:\n\nUse 'wsl.exe --list --online' to "
                "list available distributions\nand 'wsl.exe --install <Distro>' to install.",
            )
    found = next((name for name in distros if name.lower() == distro.lower()), None)
    if found is None:
        say(state, "There is no distribution with the supplied name.", "Wsl/Service/WSL_E_DISTRO_NOT_FOUND")
    if command is None:
        say(state, "This stand-in runs commands only; give -e or --.")
    entry = distros[found]
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/root",
        "USER": "root",
        "SHELL": "/bin/sh",
        "TERM": "xterm-256color",
        "WSL_DISTRO_NAME": found,
        "NAME": "FAKEHOST",
        "HOSTTYPE": "x86_64",
        "LANG": "C.UTF-8",
    }
    if entry.get("version", 2) == 2:
        env["WSL_INTEROP"] = "/run/WSL/1_interop"
    program = command[0]
    if "/" not in program:  # execvpe's PATH search, done before chroot (Python cannot import after it)
        found = [
            f"{d}/{program}" for d in DEFAULT_PATH.split(":") if os.access(f"{entry['root']}{d}/{program}", os.X_OK)
        ]
        program = found[0] if found else program
    os.chroot(entry["root"])
    os.chdir("/")
    try:
        os.execve(program, command, env)
    except OSError as exc:  # WSL's init prints a line like this when the command cannot be started
        message = f"<3>WSL (1) ERROR: CreateProcessEntryCommon:1: execvpe({command[0]}) failed: {exc.strerror}\n"
        sys.stderr.buffer.write(message.encode())
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
