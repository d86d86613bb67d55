"""What another user owns is not trusted: an engine socket found by looking, and the cache's
parent directories, which cgpu makes private whatever the umask."""

from __future__ import annotations

import os
import socket
import stat
import sys

import pytest

from cgpu.engines import client as engines
from cgpu.node.files import private_directory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX owners and modes")


def _as_another_user(path, monkeypatch) -> None:
    """Make `path` another user's: chown it where this is root, else pretend to be someone else."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)


def test_a_podman_socket_another_user_owns_is_refused_with_the_reason(tmp_path, monkeypatch):
    runtime = tmp_path / "run" / "podman"
    runtime.mkdir(parents=True)
    path = str(runtime / "podman.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        assert engines.socket_refusal(path) is None  # ours: used
        _as_another_user(path, monkeypatch)
        reason = engines.socket_refusal(path)
        assert reason is not None and reason.startswith(f"not using the podman socket {path}: ")
        assert "belongs to uid" in reason and "CONTAINER_HOST" in reason


def test_root_with_the_users_runtime_dir_starts_its_own_service_and_says_why(tmp_path, monkeypatch):
    """`sudo -E`: XDG_RUNTIME_DIR is the user's, whose podman.sock (here a fake API) must not answer."""
    runtime = tmp_path / "run"
    (runtime / "podman").mkdir(parents=True)
    path = str(runtime / "podman" / "podman.sock")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("CONTAINER_HOST", raising=False)
    monkeypatch.setattr(engines, "podman_socket_candidates", lambda timeout: [path])
    started = []

    class Service:
        url = "unix:///nonexistent/cgpu-private.sock"

        @classmethod
        def start(cls, *, timeout):
            started.append(timeout)
            return cls()

        def stop(self):
            pass

    monkeypatch.setattr(engines, "PodmanService", Service)
    said = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        _as_another_user(path, monkeypatch)
        with pytest.raises(engines.EngineError) as raised:  # the private service's URL answers nothing here
            engines._open_podman(engines._Budget(1, None), said.append)
    assert started and "/nonexistent/cgpu-private.sock" in str(raised.value)
    assert said[0].startswith(f"not using the podman socket {path}")


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_cache_parents_are_made_0700_whatever_the_umask(tmp_path, umask):
    cache = tmp_path / "home" / ".cache" / "cgpu" / "cdi-specs"
    before = stat.S_IMODE(os.lstat(tmp_path).st_mode)
    old = os.umask(umask)
    try:
        private_directory(cache, create=True)
    finally:
        os.umask(old)
    for directory in (tmp_path / "home", tmp_path / "home" / ".cache", cache.parent, cache):
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700, directory
    assert stat.S_IMODE(os.lstat(tmp_path).st_mode) == before  # what existed is left as it was
