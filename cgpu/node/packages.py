"""An image's package database, read from its files: rpm (sqlite), dpkg, apk; dnf version locks.

rpm header blobs as rpm stores them in rpmdb.sqlite (`Packages.blob`, rpm's `headerExport`
format without the 8-byte magic): big-endian int32 `il` (index entries), `dl` (data bytes),
then `il` entries of (tag, type, offset, count), then the data. Strings end with NUL.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import signal
import sqlite3
import struct
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cgpu.node.bounds import Deadline, ImageReadError

# rpm tags and types (rpm's include/rpm/rpmtag.h)
TAG_NAME, TAG_VERSION, TAG_RELEASE, TAG_EPOCH = 1000, 1001, 1002, 1003
TAG_BUILDHOST, TAG_VENDOR, TAG_PACKAGER, TAG_ARCH = 1007, 1011, 1015, 1022
TAG_DIRINDEXES, TAG_BASENAMES, TAG_DIRNAMES = 1116, 1117, 1118
TAG_PROVIDENAME, TAG_PROVIDEVERSION = 1047, 1113
TYPE_INT32, TYPE_STRING, TYPE_STRING_ARRAY, TYPE_I18NSTRING = 4, 6, 8, 9
_MAX_INDEX = 0xFFFF  # rpm's HEADER_TAGS_MAX
_MAX_DATA = 256 * 1024**2  # rpm's HEADER_DATA_MAX
_MAX_PACKAGES = 200_000  # a full Fedora install has a few thousand
# The file paths a reader keeps, all packages together, each counted with what Python holds it in
# (a str and its list slot): a full Fedora or Alpine install lists a few MB of paths
MAX_FILE_LIST = 64 << 20
_PATH_OVERHEAD = 64
_BLOCK = 1 << 16  # the text databases are split in blocks of lines this long, the deadline asked after each


class RpmHeaderError(ImageReadError):
    pass


@dataclass
class Package:
    name: str
    version: str
    release: str = ""
    epoch: int | None = None
    arch: str = ""
    vendor: str = ""
    packager: str = ""
    buildhost: str = ""
    files: list[str] = field(default_factory=list)  # only when asked for
    # What the package was built with: dpkg's Built-Using and Static-Built-Using fields, as written
    built_using: str = ""
    # rpm Provides as (name, version), only when asked for: Go packages list their bundled modules
    # as `bundled(golang(MODULE)) = VERSION`
    provides: list[tuple[str, str]] = field(default_factory=list)

    @property
    def evr(self) -> str:
        vr = f"{self.version}-{self.release}" if self.release else self.version
        return f"{self.epoch}:{vr}" if self.epoch else vr

    @property
    def nevr(self) -> str:
        return f"{self.name}-{self.evr}"

    @property
    def nevra(self) -> str:
        """As libdnf5 spells it (`to_nevra_string`: no epoch when it is 0)."""
        return f"{self.nevr}.{self.arch}"


def parse_rpm_header(
    blob: bytes, *, with_files: bool = False, with_provides: bool = False, max_file_list: int = MAX_FILE_LIST
) -> Package:
    """One rpm header blob -> Package; RpmHeaderError for anything malformed, or for a file list
    that would hold more than `max_file_list` (paths counted as in MAX_FILE_LIST: each is a
    directory name and a base name, so one long directory named by many files multiplies)."""
    if len(blob) < 8:
        raise RpmHeaderError("rpm header shorter than its 8-byte preamble")
    il, dl = struct.unpack_from(">ii", blob, 0)
    if not (0 < il <= _MAX_INDEX) or not (0 <= dl <= _MAX_DATA):
        raise RpmHeaderError(f"rpm header claims {il} entries and {dl} data bytes")
    data_start = 8 + 16 * il
    if len(blob) < data_start + dl:
        raise RpmHeaderError(f"rpm header is {len(blob)} bytes, shorter than the {data_start + dl} it claims")
    data = blob[data_start : data_start + dl]
    index: dict[int, tuple[int, int, int]] = {}
    for number in range(il):
        tag, kind, offset, count = struct.unpack_from(">iiii", blob, 8 + 16 * number)
        if not (0 <= offset < max(dl, 1)) or count < 0:
            raise RpmHeaderError(f"rpm header entry for tag {tag} points outside its data")
        index.setdefault(tag, (kind, offset, count))

    def strings(tag: int) -> list[str]:
        if tag not in index:
            return []
        kind, offset, count = index[tag]
        if kind not in (TYPE_STRING, TYPE_STRING_ARRAY, TYPE_I18NSTRING):
            raise RpmHeaderError(f"rpm tag {tag} has type {kind}, not a string")
        wanted = 1 if kind == TYPE_STRING else count
        values = []
        for _ in range(wanted):
            end = data.find(b"\0", offset)
            if end < 0:
                raise RpmHeaderError(f"rpm tag {tag}: string runs past the header's data")
            values.append(data[offset:end].decode("utf-8", errors="replace"))
            offset = end + 1
        return values

    def string(tag: int) -> str:
        values = strings(tag)
        return values[0] if values else ""

    def int32s(tag: int) -> list[int]:
        if tag not in index:
            return []
        kind, offset, count = index[tag]
        if kind != TYPE_INT32 or offset % 4 or offset + 4 * count > dl:
            raise RpmHeaderError(f"rpm tag {tag} is not a well-formed INT32 array")
        return list(struct.unpack_from(f">{count}i", data, offset))

    name = string(TAG_NAME)
    if not name:
        raise RpmHeaderError("rpm header has no NAME")
    epochs = int32s(TAG_EPOCH)
    package = Package(
        name=name,
        version=string(TAG_VERSION),
        release=string(TAG_RELEASE),
        epoch=epochs[0] if epochs else None,
        arch=string(TAG_ARCH),
        vendor=string(TAG_VENDOR),
        packager=string(TAG_PACKAGER),
        buildhost=string(TAG_BUILDHOST),
    )
    if with_files:
        dirs, bases, where = strings(TAG_DIRNAMES), strings(TAG_BASENAMES), int32s(TAG_DIRINDEXES)
        if len(where) != len(bases) or any(not 0 <= i < len(dirs) for i in where):
            raise RpmHeaderError(f"{name}: the file list's directory indexes do not match its names")
        size = sum(len(dirs[i]) + len(base) + _PATH_OVERHEAD for i, base in zip(where, bases, strict=True))
        if size > max_file_list:
            raise RpmHeaderError(f"{name}: its file list comes to more than {max_file_list >> 20} MiB; not read")
        package.files = [dirs[i] + base for i, base in zip(where, bases, strict=False)]
    if with_provides:
        names, versions = strings(TAG_PROVIDENAME), strings(TAG_PROVIDEVERSION)
        if len(versions) != len(names):
            raise RpmHeaderError(f"{name}: {len(names)} provides but {len(versions)} provide versions")
        package.provides = list(zip(names, versions, strict=True))
    return package


def read_rpmdb(
    db: bytes,
    wal: bytes | None = None,
    *,
    files_with: bytes = b"",
    provides_with: bytes = b"",
    deadline: Deadline | None = None,
) -> tuple[list[Package], list[str]]:
    """All packages in an rpmdb.sqlite (its bytes, and its -wal file's if any).

    File lists are parsed only for headers that contain `files_with`, provides only for those
    that contain `provides_with`. Returns the packages and
    one message per header that could not be parsed; ImageReadError when the database can't be
    read, holds something other than rpm's `Packages` table, or is not read within the deadline.
    """
    packages: list[Package] = []
    bad: list[str] = []
    kept = 0  # of MAX_FILE_LIST, over all headers
    for hnum, blob in _rpmdb_rows(db, wal, deadline or Deadline(None)):
        if not isinstance(blob, bytes):
            bad.append(f"header {hnum}: not a blob")
            continue
        try:
            packages.append(
                parse_rpm_header(
                    blob,
                    with_files=bool(files_with) and files_with in blob,
                    with_provides=bool(provides_with) and provides_with in blob,
                    max_file_list=MAX_FILE_LIST - kept,
                )
            )
            kept += sum(len(path) + _PATH_OVERHEAD for path in packages[-1].files)
        except RpmHeaderError as exc:
            bad.append(f"header {hnum}: {exc}")
    return packages, bad


def _rpmdb_rows(db: bytes, wal: bytes | None, deadline: Deadline) -> list[tuple[Any, Any]]:
    """The (hnum, blob) rows of `Packages`, from a private copy that is gone when this returns.

    SQLite runs a hostile database's views and recursive queries for as long as it is asked
    to, so the query has a progress handler that stops it at the deadline or when Ctrl-C or
    SIGTERM is pending. Those two are held back meanwhile (a Python signal handler raising
    inside the progress handler would be swallowed by sqlite3) and delivered once the copy is
    removed, so they unwind as anywhere else.
    """
    with _signals_held() as signalled:
        with tempfile.TemporaryDirectory(prefix="cgpu-rpmdb-") as tmp:
            path = os.path.join(tmp, "rpmdb.sqlite")
            with open(path, "wb") as f:
                f.write(db)
            if wal:
                with open(path + "-wal", "wb") as f:
                    f.write(wal)
            # immutable: no locks, no journal; but it also ignores a WAL, so that is opened plainly (read-only)
            uri = "file:" + urllib.parse.quote(path) + ("?mode=ro" if wal else "?mode=ro&immutable=1")
            try:
                connection = sqlite3.connect(uri, uri=True)
            except sqlite3.Error as exc:
                raise ImageReadError(f"not a readable rpm sqlite database ({exc})") from None

            def stop() -> bool:
                return deadline.expired() or signalled()

            rows: list[tuple[Any, Any]] = []
            try:
                connection.set_progress_handler(stop, 10_000)  # every 10,000 SQLite VM steps
                connection.execute("PRAGMA trusted_schema = OFF")  # no functions with side effects from the schema
                _check_schema(connection)
                for row in connection.execute("SELECT hnum, blob FROM Packages"):
                    rows.append(row)
                    if len(rows) > _MAX_PACKAGES:
                        raise ImageReadError(f"more than {_MAX_PACKAGES} package headers; not read")
                    if stop():
                        break
            except sqlite3.Error as exc:
                if not stop():
                    raise ImageReadError(f"not a readable rpm sqlite database ({exc})") from None
            finally:
                connection.close()
        deadline.check("reading the rpm database")
        if signalled():
            return []  # the held signal is delivered as this returns, and unwinds from here
    return rows


def _check_schema(connection: sqlite3.Connection) -> None:
    """`Packages` must be a plain table with plain hnum and blob columns, as rpm creates it: a view
    (a recursive one never ends), a virtual table or a generated column (`zeroblob(1e9)` per row)
    would run the database's own code."""
    found = connection.execute("SELECT type, sql FROM sqlite_master WHERE name = 'Packages'").fetchone()
    if found is None:
        raise ImageReadError("not an rpm database: it has no Packages table")
    kind, sql = found
    if kind != "table" or not isinstance(sql, str) or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
        what = "a virtual table" if kind == "table" else f"a {kind}"
        raise ImageReadError(f"not an rpm database: its Packages is {what}, not rpm's table; not read")
    columns = {row[1]: row[6] for row in connection.execute("PRAGMA table_xinfo(Packages)")}  # name: hidden
    if columns.get("hnum") != 0 or columns.get("blob") != 0:
        raise ImageReadError("not an rpm database: its Packages table lacks plain hnum and blob columns; not read")


@contextmanager
def _signals_held() -> Iterator[Callable[[], bool]]:
    """SIGINT and SIGTERM recorded instead of raised; yields 'did one arrive?'. On the way out
    the handler each had runs for the first that arrived, so it unwinds as anywhere else.

    A handler, not a signal mask: a mask holds back only this thread, and the kernel hands a
    process-wide signal to any thread that does not block it. Python runs handlers in the main
    thread only; elsewhere nothing is held (the deadline still stops the query)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    arrived: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous: dict[int, Any] = {
        signum: signal.signal(signum, lambda signum, _frame: arrived.append(signum)) for signum in held
    }
    try:
        yield lambda: bool(arrived)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if arrived:
            handler = previous[arrived[0]]
            if callable(handler):
                handler(arrived[0], None)
            elif handler == signal.SIG_DFL and arrived[0] == signal.SIGINT:
                raise KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                signal.raise_signal(arrived[0])


def _lines(text: str, deadline: Deadline, doing: str) -> Iterator[str]:
    """The lines of `text` (split at newlines), a block of them at a time, never all at once, and ""
    at its end (so the last stanza is closed); the deadline is asked after each block."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + _BLOCK)
        end = len(text) if end < 0 else end
        yield from text[start:end].split("\n")
        start = end + 1
        deadline.check(doing)
    yield ""


def read_dpkg_status(text: str, deadline: Deadline | None = None) -> list[Package]:
    """Installed packages from /var/lib/dpkg/status, in time linear in its length and memory linear
    in what it keeps, stopped at the deadline (DeadlineExceeded). A stanza ends at a blank line; a
    folded `Built-Using` goes on in continuation lines, gathered in one buffer: joined line by line
    (each copying the field so far), 2 MB of them took 28.6 s."""
    packages: list[Package] = []
    fields: dict[str, str] = {}
    folded: dict[str, io.StringIO] = {}  # a folded field's words so far, joined with spaces
    buffer = None  # the current field's, when it is one that folds
    for line in _lines(text, deadline or Deadline(None), "reading the dpkg status"):
        if line[:1] not in (" ", "\t") and ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
            folded.pop(key, None)
            buffer = None
            if key.endswith("built-using"):
                buffer = folded[key] = io.StringIO()
                buffer.write(fields[key])
        elif not line.strip():  # a blank line ends the stanza
            for name, words in folded.items():
                fields[name] = words.getvalue()
            _add_installed(packages, fields)
            fields, folded, buffer = {}, {}, None
        elif buffer is not None:
            buffer.write(" " if buffer.tell() else "")
            buffer.write(line.strip())
    return packages


def _add_installed(packages: list[Package], fields: dict[str, str]) -> None:
    if fields.get("package") and fields.get("status", "").endswith(" installed"):
        upstream, _, revision = fields.get("version", "").rpartition("-")
        if not upstream:
            upstream, revision = revision, ""
        packages.append(
            Package(
                name=fields["package"],
                version=upstream,
                release=revision,
                arch=fields.get("architecture", ""),
                vendor=fields.get("maintainer", ""),
                built_using=", ".join(
                    v for v in (fields.get("built-using", ""), fields.get("static-built-using", "")) if v
                ),
            )
        )


def read_apk_installed(text: str, *, files_with: str = "", deadline: Deadline | None = None) -> list[Package]:
    """Installed packages from Alpine's /lib/apk/db/installed, with the files whose name contains
    `files_with` (every file by default), in time linear in its length, stopped at the deadline.

    Each `R:` (file) line names a file in the last `F:` (folder) line, so the paths kept are
    charged against `MAX_FILE_LIST`: a long folder line followed by many short file lines made a
    path per line (a 10 KB image held 403 MB); past the cap, ImageReadError."""
    packages = []
    package: Package | None = None
    folder = ""
    kept = 0
    for line in _lines(text, deadline or Deadline(None), "reading the apk database"):
        key, _, value = line.partition(":")
        if not line.strip():  # the stanza ends
            if package is not None:
                packages.append(package)
            package, folder = None, ""
        elif key == "P":
            package = Package(name=value, version="")
        elif package is not None and key == "V":
            package.version = value
        elif package is not None and key == "A":
            package.arch = value
        elif key == "F":
            folder = value
        elif package is not None and key == "R" and files_with in value:
            path = f"/{folder}/{value}" if folder else f"/{value}"
            kept += len(path) + _PATH_OVERHEAD
            if kept > MAX_FILE_LIST:
                raise ImageReadError(f"its file lists come to more than {MAX_FILE_LIST >> 20} MiB; not read")
            package.files.append(path)
    return packages


@dataclass
class Lock:
    name: str  # may be a glob
    conditions: list[tuple[str, str, str]]  # (key, comparator, value); empty = any version


def read_versionlock_list(text: str) -> list[Lock]:
    """dnf4's /etc/dnf/plugins/versionlock.list: `NAME-[EPOCH:]VERSION-RELEASE.*` per line."""
    locks = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):  # `!` lines are excludes, not locks
            continue
        spec = line[:-2] if line.endswith(".*") else line
        parts = spec.rsplit("-", 2)
        if len(parts) == 3:
            locks.append(Lock(parts[0], [("evr", "=", f"{parts[1]}-{parts[2]}")]))
        else:
            locks.append(Lock(spec, []))
    return locks


def read_versionlock_toml(text: str) -> list[Lock]:
    """dnf5's /etc/dnf/versionlock.toml: `[[packages]]` tables with `[[packages.conditions]]`.

    A line scanner for the flat shape dnf5 writes, so Python 3.10 (no tomllib) reads it too.
    """
    locks: list[Lock] = []
    condition: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if re.match(r"^\[\[\s*packages\s*\]\]", line):
            locks.append(Lock("", []))
            condition = None
        elif re.match(r"^\[\[\s*packages\.conditions\s*\]\]", line) and locks:
            condition = {}
            locks[-1].conditions.append(("", "", ""))
        else:
            match = re.match(r'^(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', line)
            if match is None or not locks:
                continue
            key, value = match.groups()
            if condition is None and key == "name":
                locks[-1].name = value
            elif condition is not None and key in ("key", "comparator", "value"):
                condition[key] = value
                locks[-1].conditions[-1] = (
                    condition.get("key", ""),
                    condition.get("comparator", ""),
                    condition.get("value", ""),
                )
    return [lock for lock in locks if lock.name]


def lock_matches(locks: list[Lock], package: Package) -> tuple[bool, str]:
    """Is this installed package held at its version? (held, the lock entry in words)."""
    for lock in locks:
        if not fnmatch.fnmatchcase(package.name, lock.name):
            continue
        if not lock.conditions:
            return True, f"{lock.name} (any version)"
        evr_conditions = [c for c in lock.conditions if c[0] == "evr"]
        pinned = [value for _, comparator, value in evr_conditions if comparator == "="]
        for value in pinned:
            if _same_evr(value, package):
                return True, f"{lock.name} = {value}"
        if pinned:
            return False, f"{lock.name} = {', '.join(pinned)}, not the installed {package.evr}"
        spans = ", ".join(f"{comparator} {value}" for _, comparator, value in evr_conditions)
        return False, f"{lock.name} {spans} (a range, not the installed build)"
    return False, ""


def _same_evr(value: str, package: Package) -> bool:
    epoch, _, rest = value.rpartition(":")
    if (int(epoch) if epoch.isdigit() else 0) != (package.epoch or 0):
        return False
    return rest == f"{package.version}-{package.release}"


# --- where an rpm came from: Copr's vendor stamp, dnf's repository files, dnf5's records ----------

COPR_HUB = "copr.fedorainfracloud.org"


def copr_owner(vendor: str) -> str:
    """The owner Fedora Copr's VENDOR stamp names (`@group` for a group), "" for any other vendor.

    copr-rpmbuild defines `%vendor` as "<rpm_vendor_copr_name> - user <owner>" or
    "... - group @<group>" (rpmbuild/copr_rpmbuild/helpers.py, `macros_for_task`), and Fedora's
    instance names itself "Fedora Copr". It names no project, and Copr sets no packager.
    """
    match = re.fullmatch(r"Fedora Copr - (?:user ([^\s@]+)|group (@\S+))", vendor.strip())
    return (match.group(1) or match.group(2)) if match else ""


@dataclass(frozen=True)
class CoprRepo:
    hub: str
    owner: str  # `@group` for a group
    project: str

    @property
    def name(self) -> str:
        return f"{self.owner}/{self.project}"


def parse_copr_repo_id(repo_id: str) -> CoprRepo | None:
    """dnf's id of a copr repository, `copr:<hub>:<owner>:<project>`, or None for any other id.

    dnf5's copr plugin spells a group owner `group_<name>` there and adds `:ml` for the multilib
    repository (dnf5-plugins/copr_plugin/copr_repo.cpp); dnf4's plugin makes the same ids.
    """
    parts = repo_id.split(":", 3)
    if len(parts) != 4 or parts[0] != "copr" or not all(parts[1:]):
        return None
    _, hub, owner, project = parts
    if owner.startswith("group_"):
        owner = "@" + owner[len("group_") :]
    return CoprRepo(hub, owner, project.removesuffix(":ml"))


def read_repo_file(text: str) -> dict[str, bool]:
    """A dnf `.repo` file (ini): each section id and whether it is enabled (dnf's default: yes)."""
    sections: dict[str, bool] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            sections.setdefault(section, True)
        elif section and not line.startswith(("#", ";")) and "=" in line:
            key, _, value = line.partition("=")
            if key.strip() == "enabled":
                sections[section] = value.strip().lower() not in ("0", "no", "false", "off")
    return sections


def read_dnf5_nevras(text: str) -> dict[str, str]:
    """dnf5's /usr/lib/sysimage/libdnf5/nevras.toml: NEVRA -> id of the repository it was installed from.

    libdnf5/system/state.cpp writes `version = "1.0"` and a `[nevras]` table of
    `"name-[epoch:]version-release.arch" = {from_repo = "repo id"}`. Read with tomllib where
    Python has it (3.11+); on 3.10 with a scanner for that flat shape. ImageReadError when it is
    not TOML.
    """
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            document = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise ImageReadError(f"not valid TOML ({exc or 'nested too deeply'})") from None
        nevras = document.get("nevras")
        if not isinstance(nevras, dict):
            return {}
        return {
            nevra: state["from_repo"]
            for nevra, state in nevras.items()
            if isinstance(state, dict) and isinstance(state.get("from_repo"), str)
        }
    return _scan_nevras(text)


def _scan_nevras(text: str) -> dict[str, str]:
    """The `[nevras]` lines as libdnf5 writes them, without a TOML parser (Python 3.10)."""
    found: dict[str, str] = {}
    table = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            table = line.strip("[] ")
            continue
        match = re.fullmatch(r'"([^"\\]+)"\s*=\s*\{\s*from_repo\s*=\s*"([^"\\]*)"\s*\}', line)
        if table == "nevras" and match:
            found[match.group(1)] = match.group(2)
    return found
