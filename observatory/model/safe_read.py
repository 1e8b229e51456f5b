"""Reading the files a user names (arms and probe files, `gates check` JSONL): bounded, regular files only.

Issue 32 item 6: a directory named ``x.toml``, ``/dev/zero`` (read forever), a
FIFO (blocks), a file nobody may read, and files nested thousands of levels
deep (RecursionError in the parser) each gave an internal error or a hang.
Now each is one ObservatoryError (exit 3): only regular files are read, at
most MAX_FILE_BYTES of them, and what is parsed may nest at most MAX_DEPTH
levels (checked without recursion, so no later reader can overflow the stack).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from observatory.model.errors import ObservatoryError

# Far above any real probe suite (the bundled ones are under 40 kB) or arms file.
MAX_FILE_BYTES = 16 * 1024 * 1024
# Real files nest a few levels (a probe's messages, a tool's JSON schema); 64 leaves room for deep schemas.
MAX_DEPTH = 64


def read_text(path: Path, error: type[ObservatoryError], what: str, limit: int = MAX_FILE_BYTES) -> str:
    """PATH's text (UTF-8); ERROR naming PATH if it is missing, not a regular readable file, or over LIMIT."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read this {what} ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a directory; the {what} must be a file") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: not a regular file (a device, FIFO or socket); the {what} must be one")
    if not st.st_mode & 0o444:
        # root reads any file: the permission bits say the owner meant it unreadable
        raise error(f"{path}: not readable (mode {stat.filemode(st.st_mode)}); give it read permission")
    if st.st_size > limit:
        raise error(f"{path}: {st.st_size} bytes, over the {limit} the {what} may have")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise error(f"{path}: cannot read this {what} ({e.strerror})") from None
    if len(data) > limit:
        raise error(f"{path}: over the {limit} bytes the {what} may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e})") from None


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether VALUE (parsed JSON or TOML) nests lists and dicts deeper than LIMIT (no recursion)."""
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        if depth >= limit:
            return True
        todo.extend((x, depth + 1) for x in v)
    return False
