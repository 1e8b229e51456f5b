"""A throwaway PostgreSQL server for the storage tests, from Debian's `postgresql` package.

initdb refuses to run as root, so the cluster is made and run as the
`postgres` system user in a temporary directory it owns, listening on a Unix
socket only (no TCP port, nothing reachable from outside).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL bin directory, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return args
    runuser = shutil.which("runuser")
    return [runuser, "-u", "postgres", "--", *args] if runuser else ["su", "postgres", "-c", " ".join(args)]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh server; stop and delete it afterwards."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="obs-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
                   check=True, capture_output=True)
    opts = f"-c listen_addresses='' -c unix_socket_directories={sock} -c fsync=off"
    subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"),
                                 "-w", "start"]), check=True, capture_output=True)
    try:
        subprocess.run(_as_postgres([str(bindir / "createdb"), "-h", str(sock), "-U", "postgres", "observatory"]),
                       check=True, capture_output=True)
        yield f"postgresql+psycopg://postgres@/observatory?host={sock}"
    finally:
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
