"""The field model's raw text: pinned Debian and PyPI packages, fetched with
their ordinary clients and reduced to plain-text documents.

Reproducible from the names and versions below alone: ``fetch`` runs
``apt-get download NAME=VERSION`` (Debian bookworm) and ``pip download
--no-deps --only-binary :all: NAME==VERSION`` (the wheels hold the Python
source), then ``documents`` extracts, deterministically and with the standard
library only:

- man pages (troff, English from ``manpages``, Chinese from ``manpages-zh``'s
  zh_CN pages): the NAME line and the paragraphs of each section;
- fortunes (``fortunes-min`` English, ``fortunes-zh`` Chinese incl. Tang and
  Song poems): one document per fortune, ANSI colours removed;
- ``debian-reference-zh-cn``: the ``<p>`` paragraphs of its HTML chapters;
- the wheels' ``.py`` files (code) and ``METADATA`` (summary, version).

Usage: python -m training.field.sources [SRC_DIR]   (fetch + print sizes)
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_SRC = Path("/tmp/field-src")

DEBIAN: tuple[tuple[str, str], ...] = (
    ("manpages", "6.03-2"),
    ("manpages-zh", "1.6.4.0-1"),
    ("fortunes-min", "1:1.99.1-7.3"),
    ("fortunes-zh", "2.98"),
    ("debian-reference-zh-cn", "2.100"),
)
PYPI: tuple[tuple[str, str], ...] = (
    ("requests", "2.32.3"),
    ("click", "8.1.7"),
    ("attrs", "24.2.0"),
    ("jinja2", "3.1.4"),
)

# sha256 of the files fetched on 2026-12-01 (Debian bookworm, PyPI); `fetch` checks them.
SHA256: dict[str, str] = {
    "manpages_6.03-2_all.deb": "efa1ba4cd19ad7baeae959c9209a7eb74be2ebb858bcabb412597bfc9f588c91",
    "manpages-zh_1.6.4.0-1_all.deb": "81bae29495f6445db290e3f329f1203eb19b651c2a7ea165b74ebdc853a32ac1",
    "fortunes-min_1%3a1.99.1-7.3_all.deb": "9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07",
    "fortunes-zh_2.98_all.deb": "211c5ddee59d0ae74ce01cbfd02f7c8714740bae1835d5661eb2254edd739105",
    "debian-reference-zh-cn_2.100_all.deb": "6d2d8d9a646397e28b04cdff23d2e4374101ebf9be348e35961af62c8a2d0977",
    "requests-2.32.3-py3-none-any.whl": "70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6",
    "click-8.1.7-py3-none-any.whl": "ae74fb96c20a0277a1d615f1e4d73c8414f5a98db8b799a7931d1582f3390c28",
    "attrs-24.2.0-py3-none-any.whl": "81921eb96de3191c8258c199618104dd27ac608d9366f5e35d011eae1867ede2",
    "jinja2-3.1.4-py3-none-any.whl": "bc5dd2abb727a5319567b7a813e6a2e7318c39f4f487cfe6c89c6f9c7d25197d",
}


@dataclass
class ManPage:
    """One man page: name, section, NAME-line summary, language and the
    paragraphs of its sections in order (section title, text)."""

    name: str
    section: str
    summary: str
    lang: str
    paragraphs: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class PyFile:
    """One Python file of a wheel."""

    package: str
    version: str
    path: str
    text: str


@dataclass
class Documents:
    """Everything extracted."""

    man: list[ManPage]
    fortunes_en: list[str]
    fortunes_zh: list[str]
    reference_zh: list[str]
    code: list[PyFile]
    metadata: list[dict[str, str]]


def fetch(src: Path = DEFAULT_SRC) -> None:
    """Download the pinned packages into src/deb and src/pypi (skips what is there)."""
    deb, pypi = src / "deb", src / "pypi"
    deb.mkdir(parents=True, exist_ok=True)
    pypi.mkdir(parents=True, exist_ok=True)
    for name, version in DEBIAN:
        if not list(deb.glob(f"{name}_*.deb")):
            subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=deb, check=True)
    for name, version in PYPI:
        if not list(pypi.glob(f"{name}-{version}-*.whl")):
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                 "-d", str(pypi), f"{name}=={version}"],
                check=True,
            )
    for path in [*deb.glob("*.deb"), *pypi.glob("*.whl")]:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if SHA256.get(path.name) != digest:
            raise RuntimeError(f"{path.name}: sha256 {digest} is not the recorded {SHA256.get(path.name)}")


def _deb_members(path: Path) -> dict[str, bytes]:
    """Files of a .deb (via dpkg-deb --fsys-tarfile), name -> bytes."""
    import io
    import tarfile

    tar_bytes = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(path)], capture_output=True,
                               check=True).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                if f is not None:
                    out[m.name.lstrip("./")] = f.read()
    return out


_ESCAPES = {
    r"\(em": "—", r"\(en": "–", r"\(aq": "'", r"\(dq": '"', r"\(lq": "“", r"\(rq": "”",
    r"\(bu": "•", r"\(co": "©", r"\(rs": "\\", r"\(ga": "`", r"\(ti": "~", r"\(ha": "^",
    r"\(cq": "'", r"\(oq": "'", r"\(mc": "µ", r"\[em]": "—", r"\[en]": "–", r"\[aq]": "'",
    r"\[dq]": '"', r"\[lq]": "“", r"\[rq]": "”", r"\[bu]": "•", r"\[rs]": "\\",
}
_ESC_RE = re.compile("|".join(re.escape(k) for k in _ESCAPES))
_FONT_RE = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\s[-+]?\d|\\[,/&:%^|]|\\\*(?:\(..|\[[^\]]*\]|.)")
_MACRO_TEXT = {"B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "UR", "MT", "Nm", "Ar", "Fl"}
_HAN = r"\u3000-\u303f\u3400-\u9fff\uff00-\uffef"


def troff_text(line: str) -> str:
    """Plain text of one troff text line (fonts and escapes removed)."""
    line = _ESC_RE.sub(lambda m: _ESCAPES[m.group(0)], line)
    line = _FONT_RE.sub("", line)
    return line.replace(r"\-", "-").replace(r"\e", "\\").replace("\\ ", " ").replace("\\", "")


def _macro_args(rest: str) -> str:
    args = re.findall(r'"([^"]*)"|(\S+)', rest)
    return "".join(a or b for a, b in args) if rest else ""


def _join(lines: list[str]) -> str:
    text = " ".join(s.strip() for s in lines if s.strip())
    text = re.sub(rf"(?<=[{_HAN}]) (?=[{_HAN}])", "", text)
    return re.sub(r"\s+", " ", text).strip()


def parse_man(raw: str, lang: str) -> ManPage | None:
    """A ManPage from troff source, or None when it has no NAME line."""
    name = section = ""
    paragraphs: list[tuple[str, str]] = []
    title, cur = "", []

    def flush() -> None:
        text = _join(cur)
        if text:
            paragraphs.append((title, text))
        cur.clear()

    for line in raw.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.\\\\"')) or line.startswith("'"):
            continue
        if line.startswith("."):
            macro, _, rest = line[1:].strip().partition(" ")
            if macro == "TH":
                parts = re.findall(r'"([^"]*)"|(\S+)', rest)
                vals = [a or b for a, b in parts]
                name = troff_text(vals[0]).lower() if vals else ""
                section = vals[1] if len(vals) > 1 else ""
            elif macro in ("SH", "SS"):
                flush()
                if macro == "SH":
                    title = troff_text(rest.strip().strip('"'))
            elif macro in ("PP", "P", "LP", "TP", "IP", "sp", "br", "RS", "RE", "EX", "EE", "nf", "fi"):
                flush()
                if macro == "IP" and rest:
                    cur.append(troff_text(_macro_args(rest)))
            elif macro in _MACRO_TEXT:
                cur.append(troff_text(_macro_args(rest)))
            continue
        cur.append(troff_text(line))
    flush()
    names = [t for s, t in paragraphs if s.upper() in ("NAME", "名称", "名字", "NOM")]
    if not name or not names or " - " not in names[0]:
        return None
    summary = names[0].split(" - ", 1)[1].strip()
    body = [(s, t) for s, t in paragraphs if s.upper() not in ("NAME", "名称", "名字")]
    return ManPage(name, section, summary, lang, body)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_fortunes(raw: str) -> list[str]:
    """The fortunes of one strfile source, colours removed."""
    out = []
    for chunk in re.split(r"^%\s*$", raw, flags=re.M):
        text = _ANSI.sub("", chunk).strip("\n")
        text = "\n".join(line.rstrip() for line in text.splitlines())
        if text.strip():
            out.append(text.strip())
    return out


class _Paragraphs(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.cur: list[str] = []
        self.out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "p":
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self.depth:
            self.depth -= 1
            if not self.depth:
                text = _join(self.cur)
                if text:
                    self.out.append(html.unescape(text))
                self.cur = []

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.cur.append(data.replace("\n", " "))


def html_paragraphs(raw: str) -> list[str]:
    """The text of every <p> of an HTML page."""
    p = _Paragraphs()
    p.feed(raw)
    return p.out


def _metadata(raw: str) -> dict[str, str]:
    head = raw.split("\n\n", 1)[0]
    fields_: dict[str, str] = {}
    for line in head.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("Name", "Version", "Summary", "Requires-Python", "License") and key not in fields_:
            fields_[key] = value.strip()
    return fields_


def documents(src: Path = DEFAULT_SRC) -> Documents:
    """Every document of the pinned packages, in a fixed order."""
    docs = Documents([], [], [], [], [], [])
    for deb in sorted((src / "deb").glob("*.deb")):
        for name, data in sorted(_deb_members(deb).items()):
            if "/man/" in name and name.endswith(".gz") and "/doc/" not in name:
                if "manpages-zh" in deb.name and "/zh_CN/" not in name:
                    continue
                if "manpages_" not in deb.name and "manpages-zh" not in deb.name:
                    continue
                raw = gzip.decompress(data).decode("utf-8", "replace")
                if raw.lstrip().startswith(".so "):
                    continue
                page = parse_man(raw, "zh" if "manpages-zh" in deb.name else "en")
                if page:
                    docs.man.append(page)
            elif "/games/fortunes/" in name and not name.endswith((".dat", ".u8")):
                target = docs.fortunes_zh if "fortunes-zh" in deb.name else docs.fortunes_en
                target.extend(parse_fortunes(data.decode("utf-8", "replace")))
            elif name.endswith(".zh-cn.html"):
                docs.reference_zh.extend(html_paragraphs(data.decode("utf-8", "replace")))
    for whl in sorted((src / "pypi").glob("*.whl")):
        pkg, version = whl.name.split("-")[:2]
        with zipfile.ZipFile(whl) as z:
            for name in sorted(z.namelist()):
                if name.endswith(".py"):
                    docs.code.append(PyFile(pkg, version, name, z.read(name).decode("utf-8")))
                elif name.endswith(".dist-info/METADATA"):
                    docs.metadata.append(_metadata(z.read(name).decode("utf-8")))
    return docs


def sizes(src: Path = DEFAULT_SRC) -> dict[str, object]:
    """Package files (name, bytes) and extracted document counts and characters."""
    d = documents(src)
    files = {p.name: p.stat().st_size for p in sorted([*(src / "deb").glob("*.deb"), *(src / "pypi").glob("*.whl")])}
    return {
        "files": files,
        "man_en": [len([m for m in d.man if m.lang == "en"]),
                   sum(len(t) for m in d.man if m.lang == "en" for _, t in m.paragraphs)],
        "man_zh": [len([m for m in d.man if m.lang == "zh"]),
                   sum(len(t) for m in d.man if m.lang == "zh" for _, t in m.paragraphs)],
        "fortunes_en": [len(d.fortunes_en), sum(map(len, d.fortunes_en))],
        "fortunes_zh": [len(d.fortunes_zh), sum(map(len, d.fortunes_zh))],
        "reference_zh": [len(d.reference_zh), sum(map(len, d.reference_zh))],
        "code": [len(d.code), sum(len(f.text) for f in d.code)],
        "metadata": d.metadata,
    }


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SRC
    fetch(root)
    print(json.dumps(sizes(root), indent=1, ensure_ascii=False))
