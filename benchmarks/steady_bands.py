"""The steady-state bands of observatory/judge/steady_state.py, recomputed from stored sessions (issue 29 item 3).

For each database (default: the committed H200 examples, gunzipped to a temporary folder), every arm's
single-stream timed requests in timing order:

- probe mix: each request's TTFT over its arm's median, and the arm's median decode rate over its own,
  positions after the first (the first is where warm-up would be; printed apart);
- same probe: a probe timed again on one arm (``--repeat`` above 1) against the median of its later
  timings; and across an A/A pair (base and base#2 of one session), the same probe on both servers.

The widest of each is a band (MIX_BANDS, PROBE_BANDS); docs/design.md section 4 says which data set them.

    python benchmarks/steady_bands.py [DB ...]
"""

from __future__ import annotations

import gzip
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from observatory.judge.steady_state import _decode_rate, steady_state  # noqa: E402
from observatory.store.session_store import Store  # noqa: E402


def _examples(tmp: Path) -> list[Path]:
    out = []
    for src in sorted((REPO / "examples").glob("h200*/*.db.gz")):
        dest = tmp / f"{src.parent.name}-{src.name.removesuffix('.gz')}"
        dest.write_bytes(gzip.decompress(src.read_bytes()))
        out.append(dest)
    return out


def main(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dbs = [Path(a) for a in argv] or _examples(Path(tmp))
        mix_t: list[float] = []
        mix_d: list[float] = []
        probe_t: list[float] = []
        probe_d: list[float] = []
        aa_t: list[float] = []
        aa_d: list[float] = []
        for db in dbs:
            store = Store(str(db))
            for sid in [s.id for s in store.sessions()]:
                by_arm = {}
                for a in store.arms(sid):
                    rows = [r for r in store.results(a.id, "timed") if r.ok and r.concurrency == 1]
                    if len(rows) < 3:
                        continue
                    by_arm[a.name] = rows
                    t = [float(r.ttft_ms) for r in rows if r.ttft_ms]
                    d = [x for r in rows if (x := _decode_rate(r))]
                    mt, md = statistics.median(t), statistics.median(d)
                    first = rows[0]
                    ft, fd = float(first.ttft_ms or 0) / mt, md / (_decode_rate(first) or md)
                    mix_t += [float(r.ttft_ms) / mt for r in rows[1:] if r.ttft_ms]
                    mix_d += [md / x for r in rows[1:] if (x := _decode_rate(r))]
                    got = steady_state(rows)
                    print(f"{db.name} session {sid} {a.name}: {len(rows)} requests; first: TTFT {ft:.2f}x, "
                          f"decode 1/{fd:.2f}; warm-up found: {got['warmup']}")
                    for i, r in enumerate(rows):
                        later = [x for x in rows[i + 1:] if x.probe_id == r.probe_id]
                        if later and r.ttft_ms and (rd := _decode_rate(r)):
                            probe_t.append(float(r.ttft_ms) / statistics.median(float(x.ttft_ms or 0) for x in later))
                            probe_d.append(statistics.median(_decode_rate(x) or rd for x in later) / rd)
                for name, rows in by_arm.items():
                    copy = by_arm.get(f"{name}#2")
                    if copy is None:
                        continue
                    theirs = {(r.probe_id, r.repeat): r for r in copy}
                    for r in rows:
                        o = theirs.get((r.probe_id, r.repeat))
                        if o is None or not (r.ttft_ms and o.ttft_ms):
                            continue
                        aa_t.append(max(r.ttft_ms / o.ttft_ms, o.ttft_ms / r.ttft_ms))
                        a, b = _decode_rate(r), _decode_rate(o)
                        if a and b:
                            aa_d.append(max(a / b, b / a))
        print(f"probe mix, after the first request ({len(mix_t)} requests): TTFT up to {max(mix_t):.3f}x the "
              f"arm's median; decode rate down to 1/{max(mix_d):.3f}")
        if probe_t:
            print(f"same probe against its later timings ({len(probe_t)}): TTFT {max(probe_t):.3f}x, "
                  f"decode 1/{max(probe_d):.3f}")
        if aa_t:
            print(f"same probe on an A/A pair's two servers ({len(aa_t)}): TTFT {max(aa_t):.3f}x apart, "
                  f"decode {max(aa_d):.3f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
