"""The engines cgpu judges by, one module each, in the order `--engine auto` prefers where no
kubelet names one (docs/cdi.md "Engines"): the engines people run containers with by hand first,
containerd last (it is installed beside Docker as its back end, and judges only where nothing
else runs containers).

Adding an engine is one module (a `cgpu.engines.base.ContainerEngine` named `ENGINE`) and one
entry here: `--engine`'s choices and help, the report's engine names, what is looked for on a node
and the order of the report's engines all come from this list. The names are known without
importing a module; a module is imported when its engine is first asked for.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.base import ContainerEngine


class Registry:
    """Engine names, in `auto`'s order, each with the module that holds its `ENGINE`."""

    __slots__ = ("loaded", "modules")

    def __init__(self, modules: tuple[tuple[str, str], ...]) -> None:
        self.modules = dict(modules)
        self.loaded: dict[str, ContainerEngine] = {}

    def with_engine(self, name: str, module: str) -> Registry:
        """This registry with one more engine, last."""
        return Registry((*self.modules.items(), (name, module)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.modules)

    def spoken(self) -> str:
        """The names as a sentence says them: "podman, docker, crio or containerd"."""
        *first, last = self.names
        return f"{', '.join(first)} or {last}" if first else last

    def get(self, name: str) -> ContainerEngine:
        """The engine of that name; KeyError for one the registry does not hold."""
        engine = self.loaded.get(name)
        if engine is None:
            from importlib import import_module

            engine = self.loaded[name] = import_module(self.modules[name]).ENGINE
            if engine.name != name:
                raise RuntimeError(f"{self.modules[name]} holds the engine {engine.name!r}, not {name!r}")
        return engine

    def find(self, spelled: str) -> ContainerEngine | None:
        """The engine a user's spelling names (its name or an alias such as "cri-o"), else None."""
        if spelled in self.modules:
            return self.get(spelled)
        return next((engine for engine in self.engines() if spelled in engine.aliases), None)

    def engines(self) -> list[ContainerEngine]:
        return [self.get(name) for name in self.modules]

    def order(self, name: str) -> int:
        """Where an engine of that name sorts: `auto`'s order, an unknown name last."""
        names = self.names
        return names.index(name) if name in names else len(names)


REGISTRY = Registry(
    (
        ("podman", "cgpu.engines.podman"),
        ("docker", "cgpu.engines.docker"),
        ("crio", "cgpu.engines.crio"),
        ("containerd", "cgpu.engines.containerd"),
        ("cri-dockerd", "cgpu.engines.cri_dockerd"),
    )
)


def engine(name: str) -> ContainerEngine:
    """The engine of that name (KeyError for one cgpu does not know)."""
    return REGISTRY.get(name)


def names() -> tuple[str, ...]:
    return REGISTRY.names


def max_cdi_version(name: str, version: str) -> str | None:
    """The newest cdiVersion engine `name` at `version` accepts; None when that version reads no
    CDI specs at all. CgpuValueError (a ValueError) for an engine or version cgpu has no figure for."""
    if name not in REGISTRY.modules:
        from cgpu.errors import CgpuValueError

        raise CgpuValueError(f"unknown engine {name!r}; cgpu knows the CDI limits of {', '.join(REGISTRY.names)}")
    return REGISTRY.get(name).max_cdi_version(version)


def first_release_reading(name: str, cdi_version: str) -> str | None:
    """The release of engine `name` from which every later release reads `cdi_version`; None for an
    engine cgpu does not know or where no release reads it."""
    return REGISTRY.get(name).first_release_reading(cdi_version) if name in REGISTRY.modules else None
