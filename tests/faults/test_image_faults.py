"""`cgpu image check` faults at the CLI: archives that are FIFOs or devices (reading one would
block or never end), a FIFO blob inside an OCI layout, an engine that hangs, and Ctrl-C while
the engine exports the image. Exit 1 (could not read) or 130, and no export left in TMPDIR."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import sys
import tarfile
import tempfile
import threading
import time

import pytest

from cgpu.cli import ExitCode
from tests.faults.conftest import STOPS, hung, stand_in
from tests.image.hostile import (
    NEGATIVE_512,
    digits_pax_layer,
    end,
    gzip_bomb_layer,
    header,
    many_files_layer,
    member,
    recursive_rpmdb,
)
from tests.image.trees import alpine_tree, debian_tree, docker_archive, fedora_tree, layer_tar, oci_archive
from tests.image.trees import member as tarfile_member
from tests.timing import assert_within, timed, wait_for


@pytest.fixture
def fifo(tmp_path) -> str:
    path = tmp_path / "image.tar"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    "ref", ["oci-archive:{fifo}", "docker-archive:{fifo}", "oci-archive:/dev/zero", "docker-archive:{tmp}"]
)
def test_an_archive_that_is_not_a_file_is_refused_without_reading(cli, fifo, tmp_path, ref):
    ref = ref.format(fifo=fifo, tmp=tmp_path)
    code, out, _ = cli("image", "check", ref, "--json", timeout=30)
    result = json.loads(out)
    assert code == 1 and result["verdict"] == "unknown"
    [error] = result["problems"]
    assert error["source"] == ref and "not a regular file" in error["message"]


def test_a_fifo_blob_in_an_oci_layout_is_refused(cli, tmp_path):
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(fedora_tree(tmp_path / "root"))])
    layout = tmp_path / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    blob = max((layout / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)  # the layer
    blob.unlink()
    os.mkfifo(blob)
    code, out, _ = cli("image", "check", f"oci:{layout}", "--json", timeout=30)
    result = json.loads(out)
    assert code == 1, result
    assert "not a regular file" in json.dumps(result["problems"])


def test_a_hung_engine_is_stopped_at_the_timeout(cli, bin_dir, tmp_path):
    """The limit (1 s, or three times an immediate check on a busy host, whose start-up counts
    against it) leaves time to reach the engine."""
    hung(bin_dir, "podman")
    _, noop = timed(lambda: cli("image", "check", f"dir:{tmp_path}", "--json"))
    limit = max(1.0, round(3 * noop, 1))
    code, out, _ = cli(
        "image", "check", "localhost/cgpu-faults:none", "--json", "--timeout", f"{limit:g}", env={"DOCKER_HOST": ""},
        timeout=limit + 60,
    )  # fmt: skip
    result = json.loads(out)
    assert code == 1 and f"no answer within {limit:g} s; it was stopped" in result["reason"], result


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_the_engine_exports_leaves_no_partial_archive(cli, bin_dir, signum, status, said):
    """`podman save` has written half an archive into cgpu's temp folder when Ctrl-C comes."""
    stand_in(
        bin_dir,
        "podman",
        'case "$1 $2" in\n'
        '  "image exists") exit 0;;\n'
        '  "save --format") head -c 100000 /dev/urandom > "$5"; exec sleep 600;;\n'
        "esac\nexit 125\n",
    )
    code, out, err = cli.interrupt_when(
        lambda: cli.running("sleep 600"), "image", "check", "localhost/x:1", signum=signum
    )
    assert code == status and out == "" and said in err


# --- hostile images: each ends within its --timeout plus 2 s (or, on a busy host, plus twice what an
# immediate run of `image check` takes there), under 256 MB, nothing left behind ---------------------

_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)
MAX_PEAK_KB = 256 * 1024


def measured(
    cli,
    tmp_path,
    ref: str,
    timeout: float,
    *,
    stops: bool = False,
    baseline_ref: str = "",
    baseline_env: dict[str, str] | None = None,
    **env: str,
) -> tuple[int, dict, float]:
    """`image check REF --json --timeout T` through the CLI: (exit, answer, seconds), its peak RSS checked.
    Unless the test expects the timeout to stop the check (`stops`), T only stops a hang: it is given
    more by 30 times what a check of an empty tree takes on this host now, so that a busy host (a
    second suite, a CPU hog) does not turn an answer into a timeout.

    The baseline is that empty check, or `baseline_ref` (with `baseline_env`) where the command under
    test has more to do before it can wait at all (the Docker export imports docker-py first: the
    same export from a daemon that ends it at once).
    Where the time is checked against it, it is measured both before and after the run and the
    longer counts: under a CPU hog that starts or stops meanwhile, one measure alone misjudged."""
    peak = tmp_path / "peak"

    def check(ref: str, timeout: float, env: dict[str, str] = env) -> tuple[int, str, str]:
        return cli(
            "image",
            "check",
            ref,
            "--json",
            "--timeout",
            f"{timeout:g}",
            env=env or None,
            timeout=timeout + 60,
            wrapper=(sys.executable, "-c", _PEAK, str(peak)),
        )

    empty = tmp_path / "empty-root"
    empty.mkdir(exist_ok=True)

    def baseline() -> float:
        return timed(lambda: check(baseline_ref or f"dir:{empty}", 60, baseline_env or env))[1]

    before = baseline()
    if not stops:
        timeout = round(timeout + 30 * before, 1)
    (code, out, _), seconds = timed(lambda: check(ref, timeout))
    assert int(peak.read_text()) < MAX_PEAK_KB, f"peak RSS {int(peak.read_text()) // 1024} MB"
    assert_within(seconds, timeout, lambda: max(before, baseline()), f"image check {ref}")
    return code, json.loads(out), seconds


def messages(result: dict) -> str:
    return "\n".join(p["message"] for p in result["problems"])


def test_an_rpm_database_whose_packages_never_end(cli, tmp_path):
    root = fedora_tree(tmp_path / "root")
    recursive_rpmdb(root / "usr/lib/sysimage/rpm/rpmdb.sqlite")
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(root)])
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 5)
    assert code == ExitCode.IMAGE_UNKNOWN, result  # the image was read; its package list could not be
    assert "not an rpm database: its Packages is a view, not rpm's table" in messages(result)


def test_a_negative_member_size_in_the_archive_or_a_layer(cli, tmp_path):
    outer = tmp_path / "outer.tar"
    outer.write_bytes(header(b"manifest.json", size_field=NEGATIVE_512) + bytes(10240))
    inner = oci_archive(tmp_path / "inner.tar", [header(b"x", size_field=NEGATIVE_512) + bytes(10240)])
    for ref in (f"docker-archive:{outer}", f"oci-archive:{inner}"):
        code, result, _ = measured(cli, tmp_path, ref, 5)
        assert code == 1 and "has a negative size" in result["reason"], result


def test_a_symlink_with_a_huge_target_and_a_huge_library_path(cli, tmp_path):
    good = layer_tar(fedora_tree(tmp_path / "root"))
    link = member("usr", kind=b"2", link="../" * 300_000 + "usr2") + end()  # 900 KB, under the PAX cap
    archive = oci_archive(tmp_path / "o.tar", [good, link])
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 5)
    assert code == ExitCode.IMAGE_NO  # /usr is a broken link now: no loader, no driver
    assert "symlink /usr has a target longer than 4096 bytes; treated as broken" in messages(result)
    too_long = oci_archive(tmp_path / "o2.tar", [good, member("usr", kind=b"2", link="../" * 400_000) + end()])
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{too_long}", 5)
    assert code == 1 and "an extended (PAX) header at offset 0 is 1200018 bytes, more than 1048576" in result["reason"]
    env = docker_archive(tmp_path / "d.tar", [good], env=["LD_LIBRARY_PATH=" + "../" * 200_000])
    code, result, _ = measured(cli, tmp_path, f"docker-archive:{env}", 5)
    assert code == ExitCode.OK, result


def test_a_pax_header_of_digits(cli, tmp_path):
    """CVE-2024-6232's shape: 619 bytes of gzip that took tarfile 55 s."""
    archive = oci_archive(tmp_path / "o.tar", [digits_pax_layer()], gzip_layers=False)
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 5)
    assert code == 1 and "the extended header at offset 0 has a malformed record" in result["reason"]


def test_one_layer_listed_63_times_is_read_once(cli, tmp_path):
    root = fedora_tree(tmp_path / "root")
    padding = [tarfile_member(f"usr/share/doc/f{n}", os.urandom(500)) for n in range(2000)]  # a 2 MB layer
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(root, extra=padding)] * 63, gzip_layers=False)
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 5)  # read 63 times
    assert code == ExitCode.OK and result["verdict"] == "yes", result


def test_a_gzip_bomb_layer_is_stopped_at_the_timeout(cli, tmp_path):
    bomb = tmp_path / "bomb.gz"
    gzip_bomb_layer(bomb, 16)  # 16 GiB of zeros in 16 MB
    archive = oci_archive(tmp_path / "o.tar", [bomb.read_bytes()], gzip_layers=False)
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 2, stops=True)
    assert code == 1 and "not done within --timeout 2 s; stopped" in result["reason"], result


@pytest.mark.slow
def test_a_layer_of_too_many_files(cli, tmp_path):
    layer = tmp_path / "many.gz"
    many_files_layer(layer, 400_001)
    archive = oci_archive(tmp_path / "o.tar", [layer.read_bytes()], gzip_layers=False)
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 60)
    assert code == 1 and "the image has more than 400000 files; stopped reading" in result["reason"], result


@pytest.mark.slow
def test_an_image_just_under_the_member_cap_stays_under_256_mb(cli, tmp_path):
    layer = tmp_path / "many.gz"
    many_files_layer(layer, 399_000, elf_heads=True)
    archive = oci_archive(tmp_path / "o.tar", [layer.read_bytes()], gzip_layers=False)
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 60)  # the peak is what this checks
    assert code == ExitCode.IMAGE_NO and result["status"] == "checked", result


def test_a_folded_built_using_field_in_the_dpkg_status(cli, tmp_path):
    """A Built-Using folded over 4 MB of one-word lines (14 KB of gzip): past 120 s under
    `--timeout 5` before (each line copied the field so far); now read, the Mesa build told."""
    root = debian_tree(tmp_path / "root")
    status = root / "var/lib/dpkg/status"
    folded = "Package: docker.io\nStatus: install ok installed\nVersion: 1-1\nBuilt-Using:\n" + " x,\n" * 1_000_000
    status.write_text(status.read_text() + folded)
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(root)])
    code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 5)
    assert result["status"] == "checked" and "/var/lib/dpkg/status" in json.dumps(result), result


def test_an_apk_database_of_one_long_folder_and_many_files(cli, tmp_path):
    """4 KB folder lines, each followed by 2-byte file lines: 403 MB for 10 KB of gzip before. The
    image check keeps only the Venus library's paths, and never more than 64 MiB of them."""
    root = alpine_tree(tmp_path / "root")
    installed = root / "lib/apk/db/installed"
    for name, files in (("x", 400_000), ("libvulkan_virtio.so", 30_000)):
        bomb = "P:bomb\nV:1\nF:" + "d" * 4000 + "\n" + f"R:{name}\n" * files
        installed.write_text(installed.read_text() + "\n" + bomb + "\n")
        archive = oci_archive(tmp_path / "o.tar", [layer_tar(root)])
        code, result, _ = measured(cli, tmp_path, f"oci-archive:{archive}", 5)  # under 256 MB: checked there
        assert result["status"] == "checked", result
    assert "file lists come to more than 64 MiB" in messages(result)


def _layout(tmp_path, name: str = "layout"):
    archive = oci_archive(tmp_path / f"{name}.tar", [layer_tar(fedora_tree(tmp_path / f"{name}-root"))])
    layout = tmp_path / name
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    return layout, max((layout / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)


def test_an_oci_layout_never_follows_a_symlinked_blob(cli, tmp_path):
    layout, blob = _layout(tmp_path)
    secret = tmp_path / "host-file"
    secret.write_bytes(blob.read_bytes())  # even the right bytes are not read through a link
    blob.unlink()
    blob.symlink_to(secret)
    code, result, _ = measured(cli, tmp_path, f"oci:{layout}", 5)
    assert (
        code == 1
        and "is a symlink (or lies under one); cgpu reads no blob from outside the layout" in (result["reason"])
    )
    folder, _ = _layout(tmp_path, "second")
    blobs = folder / "blobs"
    blobs.rename(tmp_path / "elsewhere")
    blobs.symlink_to(tmp_path / "elsewhere")
    code, result, _ = measured(cli, tmp_path, f"oci:{folder}", 5)
    assert code == 1 and "is a symlink (or lies under one)" in result["reason"]


def test_a_blob_that_does_not_match_its_digest(cli, tmp_path):
    layout, blob = _layout(tmp_path)
    data = bytearray(blob.read_bytes())
    data[-20] ^= 0xFF  # in the gzip trailer: the layer still reads
    blob.write_bytes(bytes(data))
    code, result, _ = measured(cli, tmp_path, f"oci:{layout}", 5)
    assert code == 1 and "does not match its digest" in result["reason"], result


# --- a Docker daemon (DOCKER_HOST) that exports for ever ------------------------------------------------


class _Daemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _daemon_handler(export: str, stop: threading.Event):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # a body that ends when the connection does

        def log_message(self, *args) -> None:
            pass

        def address_string(self) -> str:
            return "docker.sock"

        def do_GET(self) -> None:
            if self.path.endswith("/version"):
                return self._json({"ApiVersion": "1.41", "Version": "24.0.0"})
            if self.path.endswith("/json"):
                return self._json({"Id": "sha256:" + "0" * 64, "RepoTags": ["x:1"]})
            self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            self.end_headers()
            try:
                if export == "empty":  # an export that ends at once: not an image
                    return
                if export == "silent":
                    stop.wait(600)
                # `fast`: as fast as the socket takes it; `steady`: 10 MB/s; `slow`: a trickle; none ends
                while True:
                    self.wfile.write(bytes(64 if export == "slow" else 1024**2))
                    if export != "fast":
                        time.sleep(0.05 if export == "slow" else 0.1)
            except OSError:
                pass

        def _json(self, value: object) -> None:
            body = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def docker_daemon(tmp_path):
    pytest.importorskip("docker")
    servers = []
    stop = threading.Event()  # ends a silent export's wait: no handler thread outlives the test

    def start(export: str) -> str:
        path = tmp_path / f"docker-{export}.sock"
        server = _Daemon(str(path), _daemon_handler(export, stop))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"unix://{path}"

    yield start
    stop.set()
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("export, timeout", [("slow", 2), ("silent", 0.5)])
def test_a_docker_export_that_never_ends_honours_the_timeout(cli, tmp_path, docker_daemon, export, timeout):
    host = docker_daemon(export)
    answering = docker_daemon("empty")  # the baseline: the same export where the daemon ends it at once
    code, result, seconds = measured(
        cli,
        tmp_path,
        "docker-daemon:x:1",
        timeout,
        stops=True,
        DOCKER_HOST=host,
        baseline_ref="docker-daemon:x:1",
        baseline_env={"DOCKER_HOST": answering},
    )
    assert code == 1 and f"no complete export within --timeout {timeout:g} s; stopped" in result["reason"], result
    assert seconds >= timeout  # 0.5 stays 0.5, not 0


def test_a_docker_export_larger_than_the_cap_is_stopped(tmp_path, docker_daemon, monkeypatch):
    from cgpu.image.fs import Deadline, ImageReadError, Limits
    from cgpu.image.source import open_image

    monkeypatch.setenv("DOCKER_HOST", docker_daemon("fast"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # read TMPDIR again
    try:
        with pytest.raises(ImageReadError, match="Docker's export of x:1 is larger than 8388608 bytes; stopped"):
            with open_image("docker-daemon:x:1", deadline=Deadline(30), limits=Limits(max_total_bytes=8 * 1024**2)):
                pass
    finally:
        tempfile.tempdir = None
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_docker_export_stops_writing_at_the_deadline(tmp_path, docker_daemon, monkeypatch):
    """An export of 10 MB/s that never ends: every write into the archive starts before the
    deadline, and the export's worker ends soon after it (it does not go on reading)."""
    import threading as threads

    from cgpu.engines import client as engines
    from cgpu.image import source
    from cgpu.image.fs import Deadline, ImageReadError

    monkeypatch.setenv("DOCKER_HOST", docker_daemon("steady"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again (and the old value back after)
    writes: list[float] = []
    export = engines._docker_export

    class Recorded:
        def __init__(self, out) -> None:
            self.out = out

        def write(self, chunk: bytes) -> int:
            writes.append(time.monotonic())
            return self.out.write(chunk)

    monkeypatch.setattr(
        engines, "_docker_export", lambda name, out, *rest, **named: export(name, Recorded(out), *rest, **named)
    )
    started = time.monotonic()
    deadline = Deadline(1, start=started)
    with pytest.raises(ImageReadError, match="no complete export within --timeout 1 s; stopped"):
        with source.open_image("docker-daemon:x:1", deadline=deadline):
            pass
    end = started + 1
    assert writes and max(writes) <= end, f"{sum(w > end for w in writes)} writes after the deadline"

    def exporting() -> list[str]:
        return [t.name for t in threads.enumerate() if t.name == "cgpu-docker-save"]

    wait_for(lambda: not exporting(), within=30, what="the export's worker to end")
