"""Package databases read from image files: rpm headers and rpmdb.sqlite, dpkg, apk, dnf locks."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgpu.image.fs import Deadline, DeadlineExceeded, ImageReadError
from cgpu.node.packages import (
    CoprRepo,
    Package,
    RpmHeaderError,
    _scan_nevras,
    copr_owner,
    lock_matches,
    parse_copr_repo_id,
    parse_rpm_header,
    read_apk_installed,
    read_dnf5_nevras,
    read_dpkg_status,
    read_repo_file,
    read_rpmdb,
    read_versionlock_list,
    read_versionlock_toml,
)
from tests.image.hostile import recursive_rpmdb
from tests.image.trees import (
    COPR_REPO_ID,
    COPR_VENDOR,
    copr_repo_file,
    mesa_header,
    nevras_toml,
    rpm_header,
    write_rpmdb,
)


def test_rpm_header_fields_and_file_list():
    package = parse_rpm_header(mesa_header(), with_files=True)
    assert (package.name, package.version, package.release, package.arch) == (
        "mesa-vulkan-drivers",
        "25.3.6",
        "102.fc44",
        "aarch64",
    )
    assert package.vendor == COPR_VENDOR
    assert package.epoch is None and package.nevr == "mesa-vulkan-drivers-25.3.6-102.fc44"
    assert "/usr/lib64/libvulkan_virtio.so" in package.files
    with_epoch = parse_rpm_header(rpm_header(NAME="x", VERSION="1", RELEASE="2", EPOCH=3))
    assert with_epoch.evr == "3:1-2"


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"\x00\x00", "shorter than its 8-byte preamble"),
        (struct.pack(">ii", 0x7FFFFFFF, 10), "claims"),
        (struct.pack(">ii", 1, 100), "shorter than the"),
        (struct.pack(">ii", 1, 4) + struct.pack(">iiii", 1000, 6, 0, 1) + b"abcd", "string runs past"),
        (struct.pack(">ii", 1, 4) + struct.pack(">iiii", 1000, 6, 99, 1) + b"ab\0\0", "points outside"),
        (struct.pack(">ii", 1, 4) + struct.pack(">iiii", 1000, 4, 0, 1) + b"\0\0\0\1", "not a string"),
        (struct.pack(">ii", 1, 4) + struct.pack(">iiii", 1001, 6, 0, 1) + b"ab\0\0", "no NAME"),
    ],
)
def test_malformed_rpm_headers_are_named(blob, message):
    with pytest.raises(RpmHeaderError, match=message):
        parse_rpm_header(blob)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_rpm_header_bytes_give_only_header_errors(blob):
    try:
        parse_rpm_header(blob, with_files=True)
    except RpmHeaderError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_real_headers_give_only_header_errors(data):
    blob = bytearray(mesa_header())
    for _ in range(data.draw(st.integers(1, 8))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    try:
        parse_rpm_header(bytes(blob), with_files=True)
    except RpmHeaderError:
        pass


def test_rpmdb_sqlite_reads_every_package_and_reports_bad_headers(tmp_path):
    db = tmp_path / "rpmdb.sqlite"
    write_rpmdb(db, [mesa_header(), rpm_header(NAME="glibc", VERSION="2.42", RELEASE="5.fc44"), b"junk"])
    packages, bad = read_rpmdb(db.read_bytes(), files_with=b"libvulkan_virtio.so")
    assert [p.name for p in packages] == ["mesa-vulkan-drivers", "glibc"]
    assert packages[0].files and not packages[1].files  # file lists only where asked
    assert bad == ["header 3: rpm header shorter than its 8-byte preamble"]
    with pytest.raises(ImageReadError, match="not a readable rpm sqlite database"):
        read_rpmdb(b"SQLite format 3\0" + b"\xff" * 200)


@pytest.mark.parametrize(
    "schema, words",
    [
        ("", "its Packages is a view, not rpm's table"),
        ("CREATE TABLE Other(x)", "it has no Packages table"),
        (
            "CREATE TABLE Packages(hnum INTEGER, blob BLOB AS (zeroblob(1000000000)))",
            "its Packages table lacks plain hnum and blob",
        ),
        ("CREATE TABLE Packages(hnum INTEGER, data BLOB)", "its Packages table lacks plain hnum and blob"),
    ],
)
def test_a_database_that_would_run_its_own_code_is_refused(tmp_path, schema, words):
    db = tmp_path / "rpmdb.sqlite"
    if schema:
        with sqlite3.connect(db) as connection:
            connection.execute(schema)
        connection.close()
    else:
        recursive_rpmdb(db)  # a view that never ends
    with pytest.raises(ImageReadError, match=f"not an rpm database: {words}"):
        read_rpmdb(db.read_bytes(), deadline=Deadline(5))


def many_rows(tmp_path) -> bytes:
    db = tmp_path / "rpmdb.sqlite"
    write_rpmdb(db, [mesa_header()])
    with sqlite3.connect(db) as connection:
        connection.executemany("INSERT INTO Packages(blob) VALUES (?)", [(b"x",)] * 20_000)
    connection.close()
    return db.read_bytes()


def test_the_query_stops_at_the_deadline_and_leaves_no_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(DeadlineExceeded, match="reading the rpm database: not done within --timeout 0 s"):
        read_rpmdb(many_rows(tmp_path), deadline=Deadline(0))
    assert not list(tmp_path.glob("cgpu-rpmdb-*"))


@pytest.mark.skipif(not hasattr(os, "kill"), reason="sends itself SIGINT")
def test_ctrl_c_during_the_query_stops_it_and_then_unwinds(tmp_path, monkeypatch):
    """sqlite3 swallows an exception raised inside a progress handler, so Ctrl-C is held back
    while SQLite runs, stops the query, and is delivered once the temp copy is gone."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = many_rows(tmp_path)

    class CtrlCMidQuery(Deadline):
        def expired(self) -> bool:  # asked by the progress handler, inside the query
            os.kill(os.getpid(), signal.SIGINT)
            return False

    with pytest.raises(KeyboardInterrupt):
        read_rpmdb(data, deadline=CtrlCMidQuery(None))
    assert not list(tmp_path.glob("cgpu-rpmdb-*"))


def test_a_database_with_a_wal_is_read_with_it(tmp_path):
    db = tmp_path / "rpmdb.sqlite"
    write_rpmdb(db, [mesa_header()])
    connection = sqlite3.connect(db)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.execute("INSERT INTO Packages(blob) VALUES (?)", (rpm_header(NAME="glibc", VERSION="2.42"),))
    connection.commit()
    wal = (tmp_path / "rpmdb.sqlite-wal").read_bytes()
    main = db.read_bytes()
    connection.close()
    packages, _ = read_rpmdb(main, wal)
    assert [p.name for p in packages] == ["mesa-vulkan-drivers", "glibc"]


needs_rpm = pytest.mark.skipif(
    not (shutil.which("rpm") and shutil.which("rpmbuild")), reason="rpm/rpmbuild not installed (apt-get install rpm)"
)


@needs_rpm
def test_rpm_itself_reads_the_headers_these_tests_write(tmp_path):
    write_rpmdb(tmp_path / "rpmdb.sqlite", [mesa_header()])
    # rpm wants its index tables too; --rebuilddb makes them from the headers, and drops any it finds bad
    subprocess.run(["rpm", "--dbpath", str(tmp_path), "--rebuilddb"], check=True, capture_output=True, timeout=60)
    out = subprocess.run(
        ["rpm", "--dbpath", str(tmp_path), "-qa", "--qf", "%{NAME}|%{VERSION}-%{RELEASE}|%{VENDOR}\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"mesa-vulkan-drivers|25.3.6-102.fc44|{COPR_VENDOR}", out.stderr
    files = subprocess.run(
        ["rpm", "--dbpath", str(tmp_path), "-qa", "--qf", "[%{FILENAMES}\\n]"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "/usr/lib64/libvulkan_virtio.so" in files.stdout.split()


@needs_rpm
def test_reads_a_database_rpm_wrote_for_a_package_rpmbuild_built(tmp_path):
    spec = tmp_path / "mesa.spec"
    spec.write_text(
        "Name: mesa-vulkan-drivers\nVersion: 25.3.6\nRelease: 102.fc44\nSummary: t\nLicense: MIT\n"
        f"Vendor: {COPR_VENDOR}\nBuildArch: noarch\n%description\nt\n%install\n"
        "mkdir -p %{buildroot}/usr/lib64\necho x > %{buildroot}/usr/lib64/libvulkan_virtio.so\n"
        "%files\n/usr/lib64/libvulkan_virtio.so\n"
    )
    top, db = tmp_path / "top", tmp_path / "db"
    subprocess.run(
        ["rpmbuild", "-bb", "--define", f"_topdir {top}", str(spec)], check=True, capture_output=True, timeout=120
    )
    built = next(top.rglob("*.rpm"))
    subprocess.run(["rpm", "--dbpath", str(db), "--initdb"], check=True, timeout=60)
    subprocess.run(
        ["rpm", "--dbpath", str(db), "-i", "--justdb", "--nodeps", "--ignorearch", "--ignoreos", str(built)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    wal = db / "rpmdb.sqlite-wal"
    packages, bad = read_rpmdb(
        (db / "rpmdb.sqlite").read_bytes(),
        wal.read_bytes() if wal.exists() else None,
        files_with=b"libvulkan_virtio.so",
    )
    assert not bad
    [package] = packages
    assert (package.nevr, package.vendor) == ("mesa-vulkan-drivers-25.3.6-102.fc44", COPR_VENDOR)
    assert package.files == ["/usr/lib64/libvulkan_virtio.so"]


def test_dpkg_status_installed_only():
    text = (
        "Package: mesa-vulkan-drivers\nStatus: install ok installed\nVersion: 1:22.3.6-1+deb12u1\n"
        "Description: x\n continued: line\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    [package] = read_dpkg_status(text)
    assert (package.name, package.version, package.release) == ("mesa-vulkan-drivers", "1:22.3.6", "1+deb12u1")


def test_apk_installed_with_files():
    [package] = read_apk_installed("P:mesa-vulkan-virtio\nV:25.1.9-r0\nF:usr/lib\nR:libvulkan_virtio.so\n")
    assert package.nevr == "mesa-vulkan-virtio-25.1.9-r0" and package.files == ["/usr/lib/libvulkan_virtio.so"]


# --- hostile databases: linear in their length, bounded in memory, stopped at the deadline ---------


def _seconds(action) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def _folded_status(size: int, field: str = "Built-Using") -> str:
    """One installed package whose `field` is folded over `size` bytes of one-word continuation lines."""
    return f"Package: docker.io\nStatus: install ok installed\nVersion: 1-1\n{field}:\n" + " x,\n" * (size // 4)


def test_a_folded_built_using_field_is_joined_in_linear_time():
    """2 MB took 28.6 s (each continuation line copied the whole field so far); now as long as a
    2 MB folded Description, which is not joined at all, measured on this host now."""
    took = _seconds(lambda: read_dpkg_status(_folded_status(2_000_000)))
    assert took <= 1 + 10 * _seconds(lambda: read_dpkg_status(_folded_status(2_000_000, "Description"))), took
    [package] = read_dpkg_status(_folded_status(400))
    assert package.built_using == " ".join(["x,"] * 100)


def test_the_text_databases_stop_at_the_deadline():
    with pytest.raises(DeadlineExceeded, match="reading the dpkg status"):
        read_dpkg_status(_folded_status(100_000), Deadline(0))
    with pytest.raises(DeadlineExceeded, match="reading the apk database"):
        read_apk_installed("P:a\nF:usr\n" + "R:x\n" * 10_000, deadline=Deadline(0))


def _apk_bomb(folder: int, files: int, name: str = "x") -> str:
    """A folder line of `folder` bytes and `files` file lines in it: each kept path copies the folder."""
    return "P:a\nV:1\nF:" + "d" * folder + "\n" + f"R:{name}\n" * files


def test_an_apk_folder_line_is_not_copied_without_bound():
    """10 KB of gzip held 403 MB: 4 KB folders for each 2-byte file line. Past MAX_FILE_LIST the
    database is refused; and a reader asking for one library's owner keeps no other path."""
    tracemalloc.start()
    try:
        with pytest.raises(ImageReadError, match="file lists come to more than 64 MiB"):
            read_apk_installed(_apk_bomb(4096, 200_000))
        tracemalloc.reset_peak()
        [package] = read_apk_installed(_apk_bomb(4096, 200_000), files_with="libvulkan_virtio.so")
        assert package.files == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak >> 20} MiB"  # the text and its lines, nothing per path


def test_an_rpm_file_list_of_one_long_directory_is_refused():
    """The rpm header's counterpart: one 1 MB directory name and 100 files in it."""
    header = rpm_header(NAME="x", DIRNAMES=["/" + "d" * 1_000_000 + "/"], BASENAMES=["f"] * 100, DIRINDEXES=[0] * 100)
    with pytest.raises(RpmHeaderError, match="its file list comes to more than"):
        parse_rpm_header(header, with_files=True)
    assert len(parse_rpm_header(header, with_files=True, max_file_list=1 << 30).files) == 100


_FIELD = st.sampled_from(["Description", "Built-Using", "Static-Built-Using", "Depends", "Maintainer"])
_WORD = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Zs", "Zl", "Zp"]), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.tuples(_FIELD, _WORD, st.lists(_WORD, max_size=5)), max_size=6)),
        max_size=5,
    )
)
def test_any_dpkg_status_reads_each_installed_package_and_its_folded_fields(stanzas):
    """Stanzas of fields, each with continuation lines, installed or not: read back as written
    (a folded Built-Using joined with spaces), whatever the words."""
    text, expected = "", []
    for number, (installed, fields) in enumerate(stanzas):
        status = "install ok installed" if installed else "deinstall ok config-files"
        text += f"Package: p{number}\nStatus: {status}\nVersion: 1.{number}-2\n"
        using = {}
        for name, first, more in fields:
            text += f"{name}: {first}\n" + "".join(f" {word}\n" for word in more)
            using[name] = " ".join([first, *more]) if name.endswith("Built-Using") else ""
        text += "\n"
        if installed:
            joined = ", ".join(v for v in (using.get("Built-Using"), using.get("Static-Built-Using")) if v)
            expected.append((f"p{number}", f"1.{number}", "2", joined))
    got = [(p.name, p.version, p.release, p.built_using) for p in read_dpkg_status(text)]
    assert got == expected


_NAME = st.text("abcxyz._-/", min_size=1, max_size=8).filter(lambda name: ":" not in name)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.tuples(_NAME, st.lists(_NAME, max_size=4)), max_size=4), max_size=4),
    st.sampled_from(["", "x", "libvulkan_virtio.so"]),
)
def test_any_apk_database_reads_its_files_in_their_folders(packages, files_with):
    text, expected = "", []
    for number, folders in enumerate(packages):
        text += f"C:Q1\nP:p{number}\nV:{number}\nA:aarch64\n"
        paths = []
        for folder, names in folders:
            text += f"F:{folder}\n" + "".join(f"R:{name}\na:0:0:755\n" for name in names)
            paths += [f"/{folder}/{name}" for name in names if files_with in name]
        text += "\n"
        expected.append((f"p{number}", str(number), paths))
    got = [(p.name, p.version, p.files) for p in read_apk_installed(text, files_with=files_with)]
    assert got == expected


MESA = Package("mesa-vulkan-drivers", "25.3.6", "102.fc44")


def test_dnf5_versionlock_toml():
    locks = read_versionlock_toml(
        'version = "1.0"\n[[packages]]\nname = "mesa-vulkan-drivers" # pinned\n'
        '[[packages.conditions]]\nkey = "evr"\ncomparator = "="\nvalue = "0:25.3.6-102.fc44"\n'
        '[[packages]]\nname = "*nvidia*"\n[[packages.conditions]]\nkey = "evr"\ncomparator = ">="\nvalue = "3:570"\n'
    )
    assert [lock.name for lock in locks] == ["mesa-vulkan-drivers", "*nvidia*"]
    assert lock_matches(locks, MESA) == (True, "mesa-vulkan-drivers = 0:25.3.6-102.fc44")
    held, why = lock_matches(locks, Package("mesa-vulkan-drivers", "25.3.7", "1.fc44"))
    assert not held and "not the installed 25.3.7-1.fc44" in why


def test_dnf4_versionlock_list():
    locks = read_versionlock_list(
        "# comment\n!mesa-vulkan-drivers-0:24.0.0-1.fc40.*\nmesa-vulkan-drivers-0:25.3.6-102.fc44.*\n"
    )
    assert lock_matches(locks, MESA)[0]
    assert lock_matches([], MESA) == (False, "")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_lock_and_status_readers_take_any_text(text):
    for lock in read_versionlock_toml(text) + read_versionlock_list(text):
        lock_matches([lock], MESA)
    read_dpkg_status(text)
    read_apk_installed(text)


# --- where a package came from -------------------------------------------------------------------


@pytest.mark.parametrize(
    "vendor, owner",
    [
        ("Fedora Copr - user slp", "slp"),
        ("Fedora Copr - user wezfurlong", "wezfurlong"),
        ("Fedora Copr - group @mesa", "@mesa"),
        ("Fedora Project", ""),
        ("Fedora Project COPR (slp/mesa-libkrun-vulkan)", ""),  # the mockchain-era form names no current build
        ("Unknown Copr - user slp", ""),  # copr-rpmbuild's default name: not Fedora's instance
        ("Fedora Copr - user ", ""),
        ("", ""),
    ],
)
def test_copr_owner_from_the_vendor_copr_stamps(vendor, owner):
    assert copr_owner(vendor) == owner


@pytest.mark.parametrize(
    "repo_id, repo",
    [
        (COPR_REPO_ID, CoprRepo("copr.fedorainfracloud.org", "slp", "mesa-libkrun-vulkan")),
        (
            "copr:copr.fedorainfracloud.org:group_mesa:mesa-git:ml",
            CoprRepo("copr.fedorainfracloud.org", "@mesa", "mesa-git"),
        ),
        (
            "copr:copr.fedorainfracloud.org:group_copr:copr-pull-requests:pr:2545",
            CoprRepo("copr.fedorainfracloud.org", "@copr", "copr-pull-requests:pr:2545"),
        ),
        ("fedora", None),
        ("@commandline", None),
        ("copr:copr.fedorainfracloud.org:slp", None),
        ("copr::slp:x", None),
    ],
)
def test_copr_repo_ids_as_dnf_makes_them(repo_id, repo):
    assert parse_copr_repo_id(repo_id) == repo


def test_repo_file_sections_and_enabled():
    name, text = copr_repo_file()
    assert name == f"_{COPR_REPO_ID}.repo"
    assert read_repo_file(text) == {COPR_REPO_ID: True}
    assert read_repo_file("[a]\nenabled = 0\n[b]\n# enabled=0\nname=b\n[c]\nenabled=False\n") == {
        "a": False,
        "b": True,
        "c": False,
    }


NEVRAS = (
    'version = "1.0"\n\n[nevras]\n'
    f'"mesa-vulkan-drivers-25.3.6-102.fc44.aarch64" = {{ from_repo = "{COPR_REPO_ID}" }}\n'
    '"vulkan-loader-1.4.313.0-1.fc44.aarch64" = {from_repo="fedora"}\n'  # toml11 before 4 wrote no spaces
    '"glibc-2.42-5.fc44.aarch64" = {from_repo=""}\n'
)


@pytest.mark.parametrize("reader", [read_dnf5_nevras, _scan_nevras])
def test_dnf5_nevras_from_repo(reader):
    assert reader(NEVRAS) == {
        "mesa-vulkan-drivers-25.3.6-102.fc44.aarch64": COPR_REPO_ID,
        "vulkan-loader-1.4.313.0-1.fc44.aarch64": "fedora",
        "glibc-2.42-5.fc44.aarch64": "",
    }
    assert reader(nevras_toml({"x-1-1.noarch": "fedora"})) == {"x-1-1.noarch": "fedora"}
    assert reader('version = "1.0"\n[groups]\n"x-1-1.noarch" = {from_repo="fedora"}\n') == {}


def test_nevra_as_libdnf5_spells_it():
    assert Package("mesa-vulkan-drivers", "25.3.6", "102.fc44", arch="aarch64").nevra == (
        "mesa-vulkan-drivers-25.3.6-102.fc44.aarch64"
    )
    assert Package("x", "1", "2", epoch=3, arch="noarch").nevra == "x-3:1-2.noarch"


def test_nevras_that_is_not_toml_is_an_image_read_error():
    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10 reads nevras.toml with a line scanner, which skips what it does not know")
    with pytest.raises(ImageReadError, match="not valid TOML"):
        read_dnf5_nevras("[nevras\n")
    with pytest.raises(ImageReadError, match="not valid TOML"):
        read_dnf5_nevras("a = " + "[" * 100_000)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_origin_readers_take_any_text(text):
    read_repo_file(text)
    _scan_nevras(text)
    parse_copr_repo_id(text)
    copr_owner(text)
    try:
        read_dnf5_nevras(text)
    except ImageReadError:
        pass
