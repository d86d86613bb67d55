"""Where cgpu keeps what it caches: one per-user directory for every cache (parsed CDI specs,
krunkit answers), and the key digest that names entries."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def default_cache_dir() -> Path:
    """`CGPU_CACHE_DIR`, else the platform's per-user cache directory, `cgpu` inside it."""
    override = os.environ.get("CGPU_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "cgpu"
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "cgpu" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG spec says to ignore relative paths
        base = str(Path.home() / ".cache")
    return Path(base) / "cgpu"


def key_digest(key: Mapping[str, Any]) -> str:
    import hashlib  # here, not at the top: default_cache_dir is on the CLI's start-up path

    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]
