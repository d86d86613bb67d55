"""Regular expressions compiled on first use: the CLI imports the modules that define them on
every run, and most are needed only by some specs or hosts (compiling them all cost about as
much as importing a large module)."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

_METHODS = ("match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer")


class _Lazy:
    """Compiles at the first attribute asked for, then holds the pattern's own bound methods as
    its attributes: later calls cost what calling the compiled pattern costs."""

    def __init__(self, pattern: Any, flags: int) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, name: str) -> Any:  # reached only while not yet compiled
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = re.compile(*self._source)
        for method in _METHODS:
            setattr(self, method, getattr(compiled, method))
        self.pattern, self.flags, self.groups = compiled.pattern, compiled.flags, compiled.groups
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy({self._source[0]!r})"


def lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """re.compile(pattern, flags), compiled when first used."""
    return _Lazy(pattern, flags)  # type: ignore[return-value]


def lazy_bytes(pattern: bytes, flags: int = 0) -> re.Pattern[bytes]:
    """re.compile for a bytes pattern, compiled when first used."""
    return _Lazy(pattern, flags)  # type: ignore[return-value]
