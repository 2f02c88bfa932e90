"""Who besides this user may change a file or directory: the one rule by which kcatalog decides whether to trust
what it reads from disk.

The load cache trusts an entry only where nobody else may change it: one owned by another user, or writable by
its group or by others, is not used (cache/store.py). Catalog files are routinely shared by a team (group-writable
checkouts) and installed by root, so for them the line is drawn at every user: a catalog directory or file that
anyone may write (where anyone could plant a manifest naming any code) is refused (read/files.py).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Exposure:
    """Who besides this user may change a path."""

    mode: int  # its permission bits
    other_owner: bool  # another user owns it (and so may change its mode)
    group: bool  # its group may write it
    everyone: bool  # every user may write it

    @property
    def private(self) -> bool:
        """Nobody but this user may change it."""
        return not (self.other_owner or self.group or self.everyone)


def exposure(path: Path) -> Exposure:
    """Who besides this user may change `path` (a symlink: what it points to); OSError when it cannot be seen.
    Where the system has no users (no os.getuid), nobody."""
    if not hasattr(os, "getuid"):
        return Exposure(0, False, False, False)
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    return Exposure(mode, info.st_uid != os.getuid(), bool(mode & stat.S_IWGRP), bool(mode & stat.S_IWOTH))
