"""Where the observatory writes reports and files: checked before a session runs, never through a link.

A report directory (issue 19 item 7) is either new, empty, or one that holds
a previous observatory report (it carries the MARKER file); anything else is
refused, so a user's own `index.html` is never overwritten. A report is
rendered into a fresh staging directory beside the target and then swapped
in whole: pages of an earlier session do not linger, and no file is opened
through a symbolic link planted in the target. Single output files (--junit,
--json) are written to a temporary file in the same directory and renamed
over the target, which replaces a link instead of writing through it.

Every check runs when the object is made, so `gate` can refuse a bad
--report / --junit / --json before any arm launches (exit 3). A report
directory's missing parents are made then; a file's directory must exist.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from observatory.model.errors import ObservatoryError

MARKER = ".observatory-report"


def _parent_ok(path: Path, option: str, create: bool = False) -> None:
    """PATH's directory exists and is writable; with CREATE, missing directories are made (mkdir -p)."""
    parent = path.parent
    if create and not parent.exists():
        try:
            parent.mkdir(parents=True)
        except OSError as e:
            raise ObservatoryError(f"{option} {path}: cannot create the directory {parent} ({e.strerror}). "
                                   "Choose another path.") from None
    if not parent.is_dir():
        raise ObservatoryError(f"{option} {path}: the directory {parent} does not exist. Create it first, "
                               "or give a path in an existing directory.")
    if not os.access(parent, os.W_OK):
        raise ObservatoryError(f"{option} {path}: the directory {parent} is not writable. Choose another path.")


def is_ours(path: Path) -> bool:
    """Whether PATH is a real directory holding a previous observatory report."""
    marker = path / MARKER
    return path.is_dir() and not path.is_symlink() and marker.is_file() and not marker.is_symlink()


@dataclass
class ReportDir:
    """A checked report directory: new, empty, or a previous report of ours (replaced whole)."""

    path: Path
    option: str = "--out"

    def __post_init__(self) -> None:
        self.path = Path(os.path.abspath(self.path))
        self.check(create=True)

    def check(self, create: bool = False) -> None:
        """Refuse a link, a file, or a directory holding anything but a report of ours.

        The report directory itself is created when written; with CREATE, its missing
        parent directories are made now (a report directory is "created if missing").
        """
        p, opt = self.path, self.option
        if p.is_symlink():
            raise ObservatoryError(f"{opt} {p} is a symbolic link; the observatory never writes through links. "
                                   "Give a real directory.")
        if p.exists():
            if not p.is_dir():
                raise ObservatoryError(f"{opt} {p} is a file; give a directory (it is created if missing).")
            if any(p.iterdir()) and not is_ours(p):
                raise ObservatoryError(
                    f"{opt} {p} holds files that are not an observatory report (no {MARKER} marker); "
                    "give a new or empty directory, so nothing of yours is overwritten.")
        _parent_ok(p, opt, create)

    def write(self, render: Callable[[Path], Path]) -> Path:
        """Render into a fresh directory with RENDER(dir) -> index, then swap it in; return the index path."""
        self.check()
        stage = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.new-", dir=self.path.parent))
        try:
            index = render(stage)
            (stage / MARKER).write_text("observatory report: this directory is replaced whole by the next one\n",
                                        encoding="utf-8")
            os.chmod(stage, 0o755)  # mkdtemp makes it 0700
            self.check()  # the target may have changed while rendering
            old = None
            if self.path.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old-", dir=self.path.parent))
                os.rename(self.path, old / "report")  # renames the directory itself, links are not followed
            os.rename(stage, self.path)
            if old is not None:
                shutil.rmtree(old)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        return self.path / index.relative_to(stage)


@dataclass
class OutputFile:
    """A checked output file (--junit, --json): its directory exists; written by rename, never through a link."""

    path: Path
    option: str

    def __post_init__(self) -> None:
        self.path = Path(os.path.abspath(self.path))
        if self.path.is_dir():
            raise ObservatoryError(f"{self.option} {self.path} is a directory; give a file path.")
        _parent_ok(self.path, self.option)

    def write_text(self, text: str) -> None:
        """Write TEXT to a temporary file beside the target and rename it over the target."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
