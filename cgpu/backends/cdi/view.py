"""What a container sees when an engine injects one CDI device: nodes, files, env, hook effects.

Built from the merged edits (`ResolvedDevice.edits()`) and the host (`HostFS`): mounts map a
container path to a host path; NVIDIA's hooks are read, never run — `create-symlinks --link
TARGET::LINK` adds links, `update-ldcache --folder DIR` makes the libraries in DIR loadable by
their SONAME (ldconfig creates those links).
"""

from __future__ import annotations

import posixpath
import re

from cgpu.cdi.model import ContainerEdits, DeviceNode, Hook, Mount
from cgpu.node.host import HostFS
from cgpu.patterns import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import cast
else:

    def cast(_type: object, value: object) -> object:  # typing.cast at run time
        return value


NVIDIA_HOOK_BINARIES = frozenset({"nvidia-cdi-hook", "nvidia-ctk"})
# Mount types whose source is not a host path (the CDI README's tmpfs example has hostPath "tmpfs").
PSEUDO_MOUNT_TYPES = frozenset(
    {"tmpfs", "proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2", "devtmpfs", "overlay", "shm", "ramfs"}
)
MAX_LINK_HOPS = 8
MAX_DIR_ENTRIES = 4096
MAX_DIR_DEPTH = 2  # levels below a small directory mount that are indexed
MAX_WALKED_ENTRIES = 256  # entries of a tree walked below its first level, all levels together
_KERNEL_FS = lazy(r"/(proc|sys|dev)(/|$)")


def library_stem(name: str) -> str | None:
    """`libcuda` of `libcuda.so.1.1`: the regex `(.+?)\\.so\\.\\d+(?:\\.\\d+)*` matched whole, as
    string work (every file of a spec's mounts, on every run)."""
    start = name.find(".so.", 1)
    while start != -1:
        if all(part.isdecimal() for part in name[start + 4 :].split(".")):
            stem = name[:start]
            return None if "\n" in stem else stem  # `.` matches no newline
        start = name.find(".so.", start + 1)
    return None


class NodePaths:
    """Device node paths: one of `prefixes` and a decimal number (`/dev/nvidia0`, the regex
    `/dev/nvidia\\d+`), or with `numbered=False` exactly a prefix. Not a regex: compiling the
    four a spec's devices need cost more than every match on the CLI's path."""

    __slots__ = ("numbered", "prefixes")

    def __init__(self, *prefixes: str, numbered: bool = True) -> None:
        self.prefixes = prefixes
        self.numbered = numbered

    def among(self, paths: Iterable[str]) -> list[str]:
        """The paths that are such nodes, in their order (the prefix test first: most are not)."""
        prefixes = self.prefixes
        return [path for path in paths if path.startswith(prefixes) and self.fullmatch(path)]

    def fullmatch(self, path: str) -> bool:
        for prefix in self.prefixes:
            if path.startswith(prefix):
                rest = path[len(prefix) :]
                if rest.isdecimal() if self.numbered else not rest:
                    return True
        return False


class HookEffects:
    __slots__ = ("ld_folders", "links", "nvidia_hooks", "other_hooks")

    def __init__(
        self,
        links: dict[str, str] | None = None,
        ld_folders: list[str] | None = None,
        nvidia_hooks: list[Hook] | None = None,
        other_hooks: list[Hook] | None = None,
    ) -> None:
        self.links = links if links is not None else {}  # link path -> target, both container paths
        self.ld_folders = ld_folders if ld_folders is not None else []
        self.nvidia_hooks = nvidia_hooks if nvidia_hooks is not None else []
        self.other_hooks = other_hooks if other_hooks is not None else []


def hook_effects(hooks: tuple[Hook, ...]) -> HookEffects:
    effects = HookEffects()
    for hook in hooks:
        command = _nvidia_hook_command(hook)
        if command is None:
            effects.other_hooks.append(hook)
            continue
        effects.nvidia_hooks.append(hook)
        if not command:
            continue
        name, flags = command[0], _flag_values(command[1:])
        if name == "create-symlinks":
            for spec in flags.get("--link", []):
                target, sep, link = spec.partition("::")
                if sep and target and link.startswith("/"):
                    link = posixpath.normpath(link)
                    base = posixpath.dirname(link)
                    effects.links[link] = posixpath.normpath(posixpath.join(base, target))
        elif name == "update-ldcache":
            for folder in flags.get("--folder", []):
                if folder.startswith("/"):
                    effects.ld_folders.append(posixpath.normpath(folder))
    return effects


def _nvidia_hook_command(hook: Hook) -> list[str] | None:
    """The hook's subcommand and arguments when it is NVIDIA's hook binary, else None."""
    args = list(hook.args)
    program = posixpath.basename(args[0]) if args else posixpath.basename(hook.path)
    if program not in NVIDIA_HOOK_BINARIES and posixpath.basename(hook.path) not in NVIDIA_HOOK_BINARIES:
        return None
    rest = args[1:] if args else []
    if program == "nvidia-ctk" and rest[:1] == ["hook"]:  # the pre-1.16 form: nvidia-ctk hook NAME ...
        rest = rest[1:]
    return rest


def _flag_values(args: list[str]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg.partition("=")
            values.setdefault(key, []).append(value)
        elif arg.startswith("--") and i + 1 < len(args):
            values.setdefault(arg, []).append(args[i + 1])
            i += 1
        i += 1
    return values


def is_bind(mount: Mount) -> bool:
    return mount.type not in PSEUDO_MOUNT_TYPES


def node_fully_specified(node: DeviceNode) -> bool:
    """The engine creates such a node itself when the host has none: the CDI library ignores the
    failed stat of a node with a type and a non-zero major (a minor of 0 reads as absent in Go, so
    it cannot be asked for), or of a FIFO."""
    if node.type == "p":
        return True
    return node.type in ("b", "c", "u") and bool(node.major)


class FileIndex:
    """The files the host provides in a container, indexed the ways the rules look them up."""

    __slots__ = ("by_folder", "libraries", "names", "paths")

    def __init__(
        self, paths: list[str], by_folder: dict[str, list[str]], libraries: dict[str, list[str]], names: set[str]
    ) -> None:
        self.paths = paths  # mounted files, directory mounts' entries, hook links
        self.by_folder = by_folder
        self.libraries = libraries  # "libcuda" -> ["/usr/lib/.../libcuda.so.580.82.07"] (no links)
        self.names = names  # file names that are not links


class ContainerView:
    """One device's container, as far as the spec and the host decide it.

    `ContainerView.of(spec_edits, host)` is the spec-level part; `with_device(edits)` layers a
    device's edits on it as the CDI library merges them (env by name, nodes by path, mounts by
    container path, hooks appended), sharing what the device does not change.
    """

    def __init__(
        self,
        host: HostFS,
        nodes: dict[str, DeviceNode],
        mounts: dict[str, Mount],
        env: dict[str, str],
        effects: HookEffects,
    ) -> None:
        self.host = host
        self.nodes = nodes
        self.mounts = mounts
        self.env = env
        self.links = effects.links
        self.ld_folders = effects.ld_folders
        self.nvidia_hooks = effects.nvidia_hooks
        self.other_hooks = effects.other_hooks
        self._index: FileIndex | None = None
        self._usable: dict[NodePaths, list[str]] = {}
        # Answers that depend on the container's files, links, env and hooks but not on its device
        # nodes: shared with a device view that only adds nodes (most devices of a spec).
        self.file_memo: dict[object, object] = {}

    @classmethod
    def of(cls, edits: ContainerEdits, host: HostFS) -> ContainerView:
        return cls(host, {}, {}, {}, HookEffects()).with_device(edits)

    def with_device(self, edits: ContainerEdits) -> ContainerView:
        nodes = {**self.nodes, **{posixpath.normpath(n.path): n for n in edits.device_nodes}}
        mounts = self.mounts
        if edits.mounts:
            mounts = {**mounts, **{posixpath.normpath(m.container_path): m for m in edits.mounts if is_bind(m)}}
        env = self.env
        if edits.env:
            env = {**env, **dict(entry.partition("=")[::2] for entry in edits.env)}
        added = hook_effects(edits.hooks)
        effects = HookEffects(
            {**self.links, **added.links} if added.links else self.links,
            self.ld_folders + added.ld_folders,
            self.nvidia_hooks + added.nvidia_hooks,
            self.other_hooks + added.other_hooks,
        )
        view = ContainerView(self.host, nodes, mounts, env, effects)
        if not (edits.mounts or edits.env or edits.hooks):
            view.file_memo = self.file_memo
        if mounts is self.mounts:  # the usual device: nodes and a few links on the spec-level files
            base = self.index
            if not added.links:
                view._index = base
            else:
                by_folder = dict(base.by_folder)
                for link in added.links:
                    folder = posixpath.dirname(link)
                    by_folder[folder] = [*by_folder.get(folder, ()), link]
                view._index = FileIndex(base.paths + list(added.links), by_folder, base.libraries, base.names)
        return view

    def without_nodes(self, paths: list[str]) -> ContainerView:
        """This container without the nodes at these container paths (its files, links and hooks shared)."""
        nodes = {path: node for path, node in self.nodes.items() if path not in paths}
        effects = HookEffects(self.links, self.ld_folders, self.nvidia_hooks, self.other_hooks)
        view = ContainerView(self.host, nodes, self.mounts, self.env, effects)
        view.file_memo = self.file_memo
        view._index = self._index
        return view

    @property
    def index(self) -> FileIndex:
        if self._index is None:
            paths: list[str] = []
            for cpath, mount in self.mounts.items():
                if self.host.is_dir(mount.host_path):
                    paths.extend(self._tree(cpath, mount.host_path))
                else:
                    paths.append(cpath)
            real = list(paths)
            paths.extend(self.links)
            by_folder: dict[str, list[str]] = {}
            for path in paths:
                by_folder.setdefault(posixpath.dirname(path), []).append(path)
            libraries: dict[str, list[str]] = {}
            names = set()
            for path in real:
                name = posixpath.basename(path)
                names.add(name)
                stem = library_stem(name)
                if stem is not None:
                    libraries.setdefault(stem, []).append(path)
            self._index = FileIndex(paths, by_folder, libraries, names)
        return self._index

    def _tree(self, container_dir: str, host_dir: str) -> list[str]:
        """The files under a directory mount: its own entries (at most MAX_DIR_ENTRIES) and, for a
        small tree, those a few levels below: the whole /usr/lib/wsl tree holds lib/libdxcore.so and
        drivers/<store folder>/libcuda.so.1.1. A big folder (a library dir, the host's /) is not walked."""
        top = self.host.listdir(host_dir)[:MAX_DIR_ENTRIES]
        if len(top) > MAX_WALKED_ENTRIES or _KERNEL_FS.match(host_dir) or posixpath.normpath(host_dir) == "/":
            return [posixpath.join(container_dir, name) for name in top]
        found: list[str] = []
        pending = [(container_dir, host_dir, 0)]
        budget = MAX_WALKED_ENTRIES
        while pending and budget > 0:
            cdir, hdir, depth = pending.pop(0)
            names = self.host.listdir(hdir)[:budget]
            budget -= len(names)
            for name in names:
                hpath = posixpath.join(hdir, name)
                if depth < MAX_DIR_DEPTH and self.host.is_dir(hpath):
                    pending.append((posixpath.join(cdir, name), hpath, depth + 1))
                else:
                    found.append(posixpath.join(cdir, name))
        return found

    # --- device nodes -------------------------------------------------------------------------
    def usable_node(self, path: str) -> bool:
        """The node is in the container and a device is behind it: the host has it. (A node with
        type and major missing on the host does not stop the container, but reaches nothing.)"""
        node = self.nodes.get(path)
        if node is None or node.permissions == "none":
            return False
        return self.host.exists(node.host_path or node.path)

    def absent_nodes(self, pattern: NodePaths) -> list[str]:
        """Nodes the spec lists that the host does not have."""
        return [p for p in pattern.among(self.nodes) if not self.usable_node(p)]

    def usable_nodes(self, pattern: NodePaths) -> list[str]:
        found = self._usable.get(pattern)
        if found is None:
            found = self._usable[pattern] = [p for p in pattern.among(self.nodes) if self.usable_node(p)]
        return found

    # --- files --------------------------------------------------------------------------------
    def follow(self, path: str) -> str:
        """A container path with the hook-made links along it followed."""
        for _ in range(MAX_LINK_HOPS):
            target = self.links.get(path)
            if target is None:
                return path
            path = target
        return path

    def host_path(self, path: str) -> str | None:
        """The host file behind a container path (after links), or None when the host does not provide it."""
        path = self.follow(posixpath.normpath(path))
        mount = self.mounts.get(path)
        if mount is not None:
            return mount.host_path
        parent = posixpath.dirname(path)
        while True:
            mount = self.mounts.get(parent)
            if mount is not None and self.host.is_dir(mount.host_path):
                return posixpath.join(mount.host_path, posixpath.relpath(path, parent))
            if parent == "/":
                return None
            parent = posixpath.dirname(parent)

    def files_in(self, folder: str) -> list[str]:
        return list(dict.fromkeys(self.index.by_folder.get(posixpath.normpath(folder), ())))

    def libraries(self, stem: str) -> list[str]:
        """Mounted files named `<stem>.so.<version>` (e.g. libcuda.so.575.64.03, libcuda.so.1.1)."""
        return self.index.libraries.get(stem, [])

    def soname_route(self, library: str, soname: str) -> tuple[str, tuple[str, ...]] | None:
        """How the dynamic linker finds `library` by its SONAME in the container, and what the image's
        libc must search for that (IMAGE_NEEDS tokens); None when nothing makes it loadable."""
        folder = posixpath.dirname(library)
        if posixpath.basename(library) == soname:
            return self._in_folder(f"mounted as {soname}", folder)
        links_by_name = cast("dict[str, list[str]] | None", self.file_memo.get("links by name"))
        if links_by_name is None:
            links_by_name = {}
            for link in self.links:
                links_by_name.setdefault(posixpath.basename(link), []).append(link)
            self.file_memo["links by name"] = links_by_name
        for link in links_by_name.get(soname, ()):
            if self.follow(self.links[link]) == library:
                return self._in_folder(f"linked as {link} by the create-symlinks hook", posixpath.dirname(link))
        if folder in self.ld_folders:
            return f"linkable as {soname} through the update-ldcache hook over {folder}", ()
        return None

    def _in_folder(self, how: str, folder: str) -> tuple[str, tuple[str, ...]] | None:
        """A SONAME file in `folder`: found by any glibc when an update-ldcache hook covers the folder,
        else only by a libc that searches it by default (which differs between distributions)."""
        if folder in self.ld_folders:
            return f"{how}; update-ldcache covers {folder}", ()
        needs = default_search_needs(folder)
        return None if needs is None else (how, needs)

    def names_library(self, value: str, relative_to: str, library: str, soname: str) -> bool:
        """Does a loader entry (`library_path` of an ICD, an .icd line) name `library`, directly or by its
        SONAME? (Whether the SONAME then resolves is `soname_route`'s question.)"""
        value = value.strip()
        if "/" not in value:
            return value in (soname, posixpath.basename(library))
        path = value if value.startswith("/") else posixpath.join(posixpath.dirname(relative_to), value)
        path = self.follow(posixpath.normpath(path))
        return path == library or (
            posixpath.basename(path) == soname and posixpath.dirname(path) == posixpath.dirname(library)
        )


_MULTIARCH = lazy(r"/(usr/)?lib/[a-z0-9_]+-linux-gnu[a-z0-9_]*")


def default_search_needs(folder: str) -> tuple[str, ...] | None:
    """What the image's libc must be for it to search `folder` without an ld.so.conf entry: ()
    for none, None when no common libc searches it. Fedora/RHEL/SUSE search /usr/lib64 (and not
    Debian's triplet folders); Debian/Ubuntu search /usr/lib/<triplet> and /usr/lib (not /usr/lib64)."""
    if folder in ("/lib64", "/usr/lib64"):
        return ("lib64-search",)
    if folder in ("/lib", "/usr/lib") or _MULTIARCH.fullmatch(folder):
        return ("multiarch-search",)
    return None


_SHELLS = lazy(r"(ba|da|z|k|c|tc|fi)?sh|busybox|python[\d.]*|perl|env")


def risky_edits(edits: ContainerEdits) -> list[str]:
    """Edits the CDI library accepts that hand the container (or a hook) too much: one message each.

    Writing to a spec dir is as good as root on the host: hooks run host programs as the engine.
    """
    found = []
    for mount in edits.mounts:
        target = mount.container_path
        if is_bind(mount) and posixpath.normpath(mount.host_path) == "/":
            found.append(f"mounts the host's whole filesystem (/) at {target} in the container")
        if not target.startswith("/") or ".." in target.split("/"):
            found.append(f"mount target {target!r} is not a clean absolute path")
        if posixpath.normpath(target) == "/etc/ld.so.preload":
            found.append(
                f"mounts {mount.host_path} onto /etc/ld.so.preload: every program in the container loads what it names"
            )
    for entry in edits.env:
        key = entry.partition("=")[0]
        if key in ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"):
            found.append(f"sets {entry}, which changes what every program in the container loads")
        elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            found.append(f"env entry {entry!r} has no valid variable name")
    for node in edits.device_nodes:
        if not node.path.startswith("/") or ".." in node.path.split("/"):
            found.append(f"device node path {node.path!r} is not a clean absolute path")
        if node.permissions == "none":
            found.append(f"device node {node.path} has permissions 'none': the container cannot open it")
    for hook in edits.hooks:
        if _nvidia_hook_command(hook) is not None:
            continue
        program = posixpath.basename(hook.args[0] if hook.args else hook.path)
        command = " ".join(hook.args)[:200]
        if _SHELLS.fullmatch(posixpath.basename(hook.path)) or _SHELLS.fullmatch(program):
            found.append(
                f"its {hook.hook_name} hook runs a shell or interpreter on the host ({hook.path}: {command}); "
                f"cgpu never runs hooks, so it cannot tell what that does"
            )
        else:
            found.append(
                f"its {hook.hook_name} hook runs the host program {hook.path}; cgpu never runs hooks, "
                f"so it cannot tell what that changes in the container"
            )
    return found
