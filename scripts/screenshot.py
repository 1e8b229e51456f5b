"""The README's screenshot: the top of a report rendered by headless Chromium at 1400 px, as a small PNG.

    python scripts/screenshot.py REPORT_DIR/index.html docs/img/report.png [HEIGHT]

Chromium (Debian's `chromium`) runs with no network and no sandbox; the page's
own CSP forbids scripts, so nothing but the report's HTML and CSS is drawn. The
PNG is cut to 1400 x HEIGHT (default 1000) and reduced to 64 colours (Pillow),
about 100 kB instead of 400.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def main() -> None:
    index, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    height = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.png"
        subprocess.run(["chromium", *FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size=1400,{height}",
                        "--virtual-time-budget=5000", f"--screenshot={raw}", index.as_uri()],
                       check=True, capture_output=True, timeout=120)
        img = Image.open(raw).convert("RGB").crop((0, 0, 1400, height))
        out.parent.mkdir(parents=True, exist_ok=True)
        img.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    print(f"wrote {out} ({out.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
