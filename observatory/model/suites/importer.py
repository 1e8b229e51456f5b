"""A log (or several) made into a suite: read, masked, deduplicated, sampled (`import_logs`).

Every file is read in its own format (given, or detected per file:
`observatory.model.suites.detect_format`) one record at a time
(`iter_suite`: masked, checked, each bad record a `Dropped`). Identical
requests are kept once across all files (the first one; the others are
dropped as duplicates naming it). Of the distinct requests left, SAMPLE are
kept by reservoir sampling with ``random.Random(SEED)``, so the same files and
seed give the same suite, in the order the records came, without holding a
whole log in memory; with no SAMPLE all are kept, up to `MAX_PROBES` (the
most a suite holds: more is sampled down to it, and the result says so).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from observatory.model.errors import ProbeFileError
from observatory.model.probe_schema import MAX_PROBES
from observatory.model.probes import Probe
from observatory.model.suites import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_TOKENS,
    Dropped,
    Limits,
    SuiteRead,
    detect_format,
    iter_suite,
    twin_key,
    unique_name,
)


@dataclass
class Imported:
    """What `import_logs` made: the probes kept, where each came from, and everything it did not keep."""

    files: list[SuiteRead]  # per file: the format read, records, dropped (probes not held here)
    probes: list[Probe] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # probe name -> FILE:LINE
    loadable: int = 0  # distinct requests that loaded, before sampling
    sample: int | None = None  # how many were asked for
    seed: int = 0
    capped: bool = False  # more than MAX_PROBES loaded and no SAMPLE was asked: sampled down to MAX_PROBES

    @property
    def dropped(self) -> list[Dropped]:
        """Every record not loaded, file by file."""
        return [d for f in self.files for d in f.dropped]

    @property
    def notes(self) -> list[str]:
        """Every file's notes."""
        return [n for f in self.files for n in f.notes]


def import_logs(paths: list[Path], fmt: str | None = None, sample: int | None = None, seed: int = 0,
                max_tokens: int = DEFAULT_MAX_TOKENS, limits: Limits = DEFAULT_LIMITS,
                progress: Callable[[str, int], None] | None = None) -> Imported:
    """PATHS read (in FMT, or each file's own), deduplicated across them and sampled; PROGRESS(path, records)
    is called every 10,000 records of a long file."""
    if sample is not None and not 1 <= sample <= MAX_PROBES:
        raise ProbeFileError(f"--sample {sample}: give 1 to {MAX_PROBES} (the most a suite holds)")
    keep = sample or MAX_PROBES
    rng = random.Random(seed)
    reservoir: list[tuple[int, str, Probe]] = []
    seen: dict[str, str] = {}
    out = Imported(files=[], sample=sample, seed=seed)
    for path in paths:
        found, how = detect_format(path, fmt, limits)
        if found == "toml":
            raise ProbeFileError(f"{path}: a TOML suite already ({how}); `suite import` reads logs and datasets "
                                 "(`suite show` reads a suite)")
        read = SuiteRead(str(path), found, how, loaded=0)
        out.files.append(read)
        for item in iter_suite(path, found, max_tokens, limits, read.notes, detected=how != "given"):
            read.records += 1
            if progress is not None and read.records % 10_000 == 0:
                progress(str(path), read.records)
            if isinstance(item, Dropped):
                read.dropped.append(item)
                continue
            where, probe = item
            first = seen.setdefault(twin_key(probe), where)
            if first != where:
                read.dropped.append(Dropped(where, "duplicate", f"the same request as {first}"))
                continue
            read.loaded = (read.loaded or 0) + 1
            k = out.loadable
            out.loadable += 1
            if len(reservoir) < keep:
                reservoir.append((k, where, probe))
            else:
                j = rng.randrange(k + 1)
                if j < keep:
                    reservoir[j] = (k, where, probe)
    out.capped = sample is None and out.loadable > MAX_PROBES
    taken: set[str] = set()
    for _, where, probe in sorted(reservoir, key=lambda x: x[0]):
        probe = unique_name(probe, taken)
        out.probes.append(probe)
        out.origins[probe.name] = where
    return out
