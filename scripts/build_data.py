#!/usr/bin/env python3
"""Build the workbook's small training corpora in ``data/`` from offline sources.

The workbook never downloads anything at run time: the corpora it uses are built once by a
developer with this script (``make data``) and committed.  Sources:

* ``web.jsonl``    text extracted from the Python documentation HTML (Debian ``python3.11-doc``),
                   kept "web-like": navigation line, headings with their pilcrows, code blocks.
* ``code.jsonl``   source files, or top-level functions / classes of larger files, from the
                   standard library of the Python running this script.
* ``books.jsonl``  the King James Bible (Debian ``bible-kjv-text``), decoded from the
                   ``bible-kjv`` program's own compressed format; one chapter per document.
* ``korean.jsonl`` the Korean Debian FAQ (Debian ``debian-faq-ko``), text of its HTML pages
                   (paragraphs unwrapped, one per line); one section per document.
* ``sft.jsonl``    ``{"input", "output"}`` pairs built from the same sources (Korean FAQ
                   question -> answer, Python FAQ question -> answer, glossary term ->
                   definition, module name -> module introduction, docstring -> function).

Packages are fetched with ``apt-get download NAME`` into a temporary directory and unpacked with
``dpkg-deb -x`` (or taken from ``--deb-dir``).  Every choice is deterministic: running the script
twice with the same package versions and the same Python gives byte-identical files.  Each file
is written under a temporary name and renamed into place.  ``data/MANIFEST.json`` records, per
file, the number of documents, the size, the SHA-256, the sources and the licence;
``data/README.md`` is generated from the same information, and the packages' copyright files are
copied verbatim into ``data/LICENSES/``.

``python scripts/build_data.py --check`` rebuilds nothing: it recomputes the manifest from the
files in ``data/`` (and checks every line parses with the right keys) and exits non-zero when
anything disagrees.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import platform
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from labsupport.fileio import atomic_write

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "data"
MANIFEST_NAME = "MANIFEST.json"
README_NAME = "README.md"
LICENSES_DIR = "LICENSES"

# Package versions this data set was built from (Debian 12 "bookworm").  The script first asks
# for exactly these; if the archive no longer carries them it takes the current candidate and
# prints a warning (the manifest then records the version actually used).
PACKAGES: dict[str, str] = {
    "python3.11-doc": "3.11.2-6+deb12u8",
    "bible-kjv-text": "4.38",
    "debian-faq-ko": "11.1",
}

PY_DOC_HTML = "usr/share/doc/python3.11/html"
KJV_DATA = "usr/lib/bible.data"
FAQ_KO_HTML = "usr/share/doc/debian/FAQ/ko"

LICENCE_PSF = "Python Software Foundation License Version 2 (PSF-2.0)"
LICENCE_SPI = (
    "Copyright (C) 1996-2003 Software in the Public Interest; verbatim and modified copies "
    "and translations permitted provided the copyright notice and permission notice are preserved"
)
LICENCE_KJV = "Public domain (King James Version text, 1611; copyright expired)"

# Selection rates.  Documents are kept when a hash of their *name* (page path and section
# number, module path and definition name, ...) falls under the rate, so the selection does
# not depend on the text itself and stays the same when a patch release edits a function.
WEB_RATE = 0.08
WEB_SPLIT_CHARS = 12_000  # pages longer than this are split into their h2 sections
WEB_MAX_DOC_CHARS = 60_000
CODE_RATE = 0.09
CODE_WHOLE_FILE_BYTES = 10_000  # smaller files are one document; larger are split per def/class
CODE_MAX_DOC_CHARS = 40_000
SFT_CODE_RATE = 0.18
SFT_CODE_MAX_OUTPUT = 2_000
SFT_KJV_RATE = 0.50
SFT_MAX_OUTPUT = 12_000

# Books of the KJV kept in books.jsonl (whole books, every chapter).
KJV_BOOKS_KEPT = (
    "Genesis", "Ruth", "Esther", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Jonah", "Matthew", "John", "Romans", "James",
)
KJV_BOOK_NAMES = (
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
    "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians",
    "1 Thessalonians", "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon",
    "Hebrews", "James", "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude",
    "Revelation",
)

# Standard-library folders that are tests, demos or vendored code rather than library code.
CODE_EXCLUDE_DIRS = {
    "test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__",
    "turtledemo", "__phello__", "lib-dynload",
}
CODE_EXCLUDE_FILES = {"_sysconfigdata_", "__hello__.py", "this.py"}
# A few non-Python text sources of the stdlib, chosen because they are indented with tabs.
CODE_EXTRA_GLOBS = ("lib2to3/Grammar.txt", "lib2to3/PatternGrammar.txt", "config-3.*/makesetup")

JsonObj = dict[str, str]
Chapter = tuple[str, int, list[tuple[int, str]]]  # (book, chapter number, [(verse, text)])


class BuildError(RuntimeError):
    """A problem the developer must fix (missing tool, unexpected package contents)."""


# --------------------------------------------------------------------------------------------
# small helpers


def stable_fraction(key: str) -> float:
    """Map ``key`` to a number in [0, 1) that is the same on every machine and run."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def jsonl_line(obj: JsonObj) -> str:
    """One JSON line; U+2028/U+2029/U+0085 are escaped so line splitters cannot break it."""
    line = json.dumps(obj, ensure_ascii=False)
    for ch in ("\u2028", "\u2029", "\x85"):
        line = line.replace(ch, "\\u%04x" % ord(ch))
    return line + "\n"


def require_tools(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise BuildError(
            "scripts/build_data.py needs %s on PATH (it fetches Debian packages with "
            "`apt-get download` and unpacks them with `dpkg-deb -x`). Run it on a Debian or "
            "Ubuntu machine, or pass --deb-dir with the .deb files (still needs dpkg-deb)."
            % " and ".join(missing)
        )


# --------------------------------------------------------------------------------------------
# fetching and unpacking Debian packages


@dataclass
class Package:
    name: str
    version: str
    deb_sha256: str
    root: Path  # where dpkg-deb -x unpacked it


def _run(cmd: Sequence[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(
        list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if proc.returncode != 0:
        raise BuildError(
            "command failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stdout)
        )
    return proc.stdout


def fetch_package(name: str, workdir: Path, deb_dir: Path | None) -> Package:
    """Download (or find in ``deb_dir``) the .deb of ``name`` and unpack it under ``workdir``."""
    if deb_dir is not None:
        debs = sorted(deb_dir.glob(name + "_*.deb"))
        if not debs:
            raise BuildError("no %s_*.deb in %s" % (name, deb_dir))
        deb = debs[-1]
    else:
        dl = workdir / "debs"
        dl.mkdir(exist_ok=True)
        pinned = PACKAGES.get(name)
        try:
            _run(["apt-get", "download", "%s=%s" % (name, pinned) if pinned else name], cwd=dl)
        except BuildError:
            print("warning: %s=%s is not in the archive any more; taking the current version"
                  % (name, pinned), file=sys.stderr)
            _run(["apt-get", "download", name], cwd=dl)
        debs = sorted(dl.glob(name + "_*.deb"))
        if len(debs) != 1:
            raise BuildError("apt-get download %s left %d .deb files" % (name, len(debs)))
        deb = debs[0]
    version = _run(["dpkg-deb", "-f", str(deb), "Version"]).strip()
    if PACKAGES.get(name) and version != PACKAGES[name]:
        print("warning: %s is version %s, the data was last built from %s"
              % (name, version, PACKAGES[name]), file=sys.stderr)
    root = workdir / ("root-" + name)
    root.mkdir()
    _run(["dpkg-deb", "-x", str(deb), str(root)])
    return Package(name, version, sha256_bytes(deb.read_bytes()), root)


# --------------------------------------------------------------------------------------------
# HTML -> text blocks (Sphinx pages of the Python docs, DocBook pages of the Debian FAQ)


@dataclass
class Block:
    kind: str  # "nav", "h1".."h6", "text", "pre", "li", "dt", "footer"
    text: str
    anchor: str = ""  # id of the heading / dt, if any
    in_dd: bool = False  # inside a <dd> (definition of a glossary term, ...)
    dl_class: str = ""  # class of the innermost <dl>


_BLOCK_TAGS = {
    "p", "div", "section", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "li", "ul", "ol",
    "dl", "dt", "dd", "table", "tr", "blockquote", "hr", "br", "title", "figure",
    "figcaption", "caption", "thead", "tbody", "header", "footer", "nav", "form",
}
_VOID_TAGS = {"br", "img", "meta", "link", "input", "hr", "area", "base", "col", "wbr", "source"}
_ASCII_WS = re.compile(r"[ \t\n\r\f\v]+")


class DocHTMLParser(HTMLParser):
    """A small, dependency-free HTML-to-text converter that keeps the page's block structure.

    Text outside ``<pre>`` has its ASCII whitespace collapsed, as a browser shows it; ``<pre>``
    keeps every character.  The first Sphinx "related" navigation bar becomes one ``nav`` line;
    sidebars, scripts, styles and repeated navigation are dropped.
    """

    def __init__(self, keep_nav: bool = True) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.title = ""
        self._keep_nav = keep_nav
        self._stack: list[tuple[str, str]] = []  # (tag, role) role in {"", "skip", "nav", ...}
        self._buf: list[str] = []
        self._skip = 0
        self._pre = 0
        self._nav = 0
        self._footer = 0
        self._in_title = False
        self._navs_seen = 0
        self._heading: tuple[str, str] | None = None  # (tag, anchor)
        self._dt_anchor = ""
        self._dd = 0
        self._dl_classes: list[str] = []
        self._pending_anchor = ""

    # -- helpers
    def _flush(self, kind: str = "text", anchor: str = "") -> None:
        raw = "".join(self._buf)
        self._buf = []
        if kind == "pre":
            text = raw.strip("\n")
            if not text.strip():
                return
        else:
            text = _ASCII_WS.sub(" ", raw).strip(" ")
            if not text:
                return
            if text == "*":  # a list bullet whose item starts with a <p>: keep it for the item
                self._buf = ["* "]
                return
        dl_class = self._dl_classes[-1] if self._dl_classes else ""
        self.blocks.append(Block(kind, text, anchor, self._dd > 0, dl_class))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        classes = a.get("class", "").split()
        role = ""
        if self._skip:
            role = "skip"
        elif tag in ("script", "style", "noscript", "link", "meta"):
            role = "skip"
        elif tag == "title":
            self._in_title = True
            role = "title"
        elif tag == "div" and ("sphinxsidebar" in classes or "navfooter" in classes
                               or "mobile-nav" in classes):
            role = "skip"
        elif tag == "div" and ("related" in classes or "navheader" in classes):
            self._navs_seen += 1
            if self._keep_nav and self._navs_seen == 1:
                self._flush()
                role = "nav"
                self._nav += 1
            else:
                role = "skip"
        elif tag == "li" and "switchers" in classes:
            role = "skip"
        elif tag == "div" and "footer" in classes:
            self._flush()
            role = "footer"
            self._footer += 1
        elif tag == "form" or (tag == "div" and "toc" in classes and self._keep_nav is False):
            role = "skip"
        if role == "skip":
            self._skip += 1
        if tag in _VOID_TAGS:
            if tag == "br" and not self._skip:
                if self._pre:
                    self._buf.append("\n")
                elif not self._nav:
                    self._flush(self._kind_here())
            if role == "skip":
                self._skip -= 1
            return
        self._stack.append((tag, role))
        if self._skip or self._nav or self._footer:
            if not self._skip and "id" in a and not self._pending_anchor:
                self._pending_anchor = a["id"]
            return
        if tag == "pre":
            self._flush(self._kind_here())
            self._pre += 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._flush(self._kind_here())
            self._heading = (tag, a.get("id", ""))
        elif tag == "dt":
            self._flush(self._kind_here())
            self._dt_anchor = a.get("id", "")
        elif tag == "dd":
            self._flush(self._kind_here())
            self._dd += 1
        elif tag == "dl":
            self._flush(self._kind_here())
            self._dl_classes.append(a.get("class", ""))
        elif tag == "li":
            self._flush(self._kind_here())
            self._buf.append("* ")
        elif tag in ("td", "th"):
            self._buf.append(" ")
        elif tag in _BLOCK_TAGS and not self._pre:
            self._flush(self._kind_here())
        if "id" in a and self._heading is not None and not self._heading[1]:
            self._heading = (self._heading[0], a["id"])
        if "id" in a and tag == "section":
            self._pending_anchor = a["id"]

    def _kind_here(self) -> str:
        if self._heading is not None:
            return self._heading[0]
        if self._pre:
            return "pre"
        for tag, _ in reversed(self._stack):
            if tag == "dt":
                return "dt"
            if tag == "li":
                return "li"
            if tag in ("dd", "div", "section", "p"):
                break
        return "text"

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self._stack):
            return
        while self._stack:
            t, role = self._stack.pop()
            self._end_one(t, role)
            if t == tag:
                break

    def _end_one(self, tag: str, role: str) -> None:
        if role == "skip":
            self._skip -= 1
            return
        if role == "title":
            self._in_title = False
            return
        if self._skip:
            return
        if role == "nav":
            self._flush("nav")
            self._nav -= 1
            return
        if role == "footer":
            self._flush("footer")
            self._footer -= 1
            return
        if self._nav or self._footer:
            if tag == "li":
                self._buf.append(" ")
            return
        if tag == "pre":
            self._flush("pre")
            self._pre -= 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self._heading is not None:
            htag, anchor = self._heading
            self._heading = None
            self._flush(htag, anchor or self._pending_anchor)
            self._pending_anchor = ""
        elif tag == "dt":
            self._flush("dt", self._dt_anchor)
        elif tag == "dd":
            self._flush(self._kind_here())
            self._dd -= 1
        elif tag == "dl":
            self._flush(self._kind_here())
            if self._dl_classes:
                self._dl_classes.pop()
        elif tag == "li":
            self._flush("li")
        elif tag in ("td", "th"):
            self._buf.append(" |")
        elif tag in _BLOCK_TAGS and not self._pre:
            self._flush(self._kind_here())

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._skip:
            return
        self._buf.append(data)

    def close(self) -> None:
        super().close()
        self._flush(self._kind_here())
        self.title = _ASCII_WS.sub(" ", self.title).strip()


def parse_html(path: Path, keep_nav: bool = True) -> DocHTMLParser:
    parser = DocHTMLParser(keep_nav=keep_nav)
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser


def blocks_to_text(blocks: Iterable[Block]) -> str:
    """Render blocks as a plain-text page: headings and code blocks set off by blank lines."""
    out: list[str] = []
    prev = ""
    for b in blocks:
        if b.kind.startswith("h") or b.kind in ("pre", "footer") or prev in ("pre", "nav"):
            if out:
                out.append("")
        elif b.kind == "text" and prev not in ("li", "dt") and prev and not prev.startswith("h"):
            out.append("")
        out.append(b.text)
        prev = b.kind
    return "\n".join(out).strip("\n") + "\n"


def strip_pilcrow(text: str) -> str:
    return text.replace("\u00b6", "").rstrip()


# --------------------------------------------------------------------------------------------
# web.jsonl


def html_pages(doc_root: Path) -> list[Path]:
    pages = []
    for p in sorted(doc_root.rglob("*.html")):
        rel = p.relative_to(doc_root).as_posix()
        if rel.startswith(("_", "genindex")) or rel in ("search.html", "py-modindex.html"):
            continue
        pages.append(p)
    return pages


def split_sections(blocks: list[Block]) -> list[list[Block]]:
    """Split a page's blocks at its h2 headings (the navigation stays with the first part)."""
    parts: list[list[Block]] = [[]]
    for b in blocks:
        if b.kind == "h2" and parts[-1] and any(x.kind not in ("nav",) for x in parts[-1]):
            parts.append([])
        parts[-1].append(b)
    # the footer belongs to the last part
    return [p for p in parts if p]


def build_web(doc_root: Path) -> list[JsonObj]:
    docs: list[JsonObj] = []
    for page in html_pages(doc_root):
        rel = page.relative_to(doc_root).as_posix()
        blocks = parse_html(page).blocks
        if len(blocks_to_text(blocks)) <= WEB_SPLIT_CHARS:
            units = [(rel, blocks)]
        else:
            units = [("%s#%d" % (rel, i), part) for i, part in enumerate(split_sections(blocks))]
        for key, part in units:
            # a section that is only a heading (plus navigation) is not a document
            if all(b.kind in ("nav", "footer") or b.kind[:1] == "h" for b in part):
                continue
            t = blocks_to_text(part)
            if len(t) > WEB_MAX_DOC_CHARS:
                continue
            if stable_fraction("web:" + key) < WEB_RATE:
                docs.append({"text": t})
    return docs


# --------------------------------------------------------------------------------------------
# code.jsonl


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources(root: Path) -> list[Path]:
    files = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if any(part in CODE_EXCLUDE_DIRS for part in rel.parts[:-1]):
            continue
        if rel.parts[0].startswith("config-"):
            continue
        if any(rel.name.startswith(x) for x in CODE_EXCLUDE_FILES):
            continue
        files.append(p)
    return files


def read_source(path: Path) -> str | None:
    """The file's exact text (newlines untouched), or None if it is not UTF-8."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except UnicodeDecodeError:
        return None


def node_span(node: ast.AST) -> tuple[int, int]:
    """1-based first and last line of a def/class, decorators included."""
    start = node.lineno  # type: ignore[attr-defined]
    for d in getattr(node, "decorator_list", []):
        start = min(start, d.lineno)
    return start, node.end_lineno  # type: ignore[attr-defined]


def code_units(rel: str, text: str) -> Iterator[tuple[str, str]]:
    """(key, text) units of one source file: the whole file, or its top-level defs/classes."""
    if len(text.encode("utf-8")) <= CODE_WHOLE_FILE_BYTES or not rel.endswith(".py"):
        yield rel, text
        return
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    lines = text.splitlines(keepends=True)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    defs = [n for n in tree.body if isinstance(n, kinds)]
    first = node_span(defs[0])[0] if defs else len(lines) + 1
    head = "".join(lines[: first - 1])
    if head.strip():
        yield rel + "::<module>", head
    for n in defs:
        a, b = node_span(n)
        yield "%s::%s" % (rel, n.name), "".join(lines[a - 1 : b])


def build_code(root: Path) -> tuple[list[JsonObj], list[str]]:
    docs: list[JsonObj] = []
    used: list[str] = []
    paths = stdlib_sources(root)
    for pattern in CODE_EXTRA_GLOBS:
        paths.extend(sorted(root.glob(pattern)))
    keyed = sorted((p.relative_to(root).as_posix(), p) for p in paths)
    for rel, path in keyed:
        text = read_source(path)
        if text is None or not text.strip():
            continue
        # the tab-indented extras are always kept: the tokenizer chapter checks tabs survive
        extra = not rel.endswith(".py")
        for key, unit in code_units(rel, text):
            if not unit.strip() or len(unit) > CODE_MAX_DOC_CHARS:
                continue
            keep_key = re.sub(r"^config-[^/]*/", "config/", key)
            if extra or stable_fraction("code:" + keep_key) < CODE_RATE:
                docs.append({"text": unit})
                used.append(keep_key)
    return docs, used


# --------------------------------------------------------------------------------------------
# books.jsonl: the bible-kjv data file


def unlzw(data: bytes, maxbits: int = 16) -> bytes:
    """Decode one Unix ``compress`` (LZW, block mode) stream without its 3-byte header.

    Codes start 9 bits wide and grow to ``maxbits``; code 256 clears the table.  As in
    compress(1), codes are read in groups of eight, so after a width change or a clear the
    reader skips to the end of the current group.
    """
    n_bits = 9
    max_entries = 1 << maxbits
    table: list[bytes] = [bytes([i]) for i in range(256)] + [b""]
    out = bytearray()
    bits = int.from_bytes(data, "little")
    total = len(data) * 8
    pos = 0
    group_start = 0
    prev: bytes | None = None

    def skip_to_group_end() -> None:
        nonlocal pos
        used = (pos - group_start) % (n_bits * 8)
        if used:
            pos += n_bits * 8 - used

    while True:
        if prev is not None and len(table) >= (1 << n_bits) and n_bits < maxbits:
            skip_to_group_end()
            n_bits += 1
            group_start = pos
        if pos + n_bits > total:
            break
        code = (bits >> pos) & ((1 << n_bits) - 1)
        pos += n_bits
        if code == 256:
            skip_to_group_end()
            del table[257:]
            n_bits = 9
            group_start = pos
            prev = None
            continue
        if prev is None:
            entry = table[code]
        elif code < len(table):
            entry = table[code]
        elif code == len(table):
            entry = prev + prev[:1]
        else:
            raise BuildError("corrupt LZW stream (code %d)" % code)
        out += entry
        if prev is not None and len(table) < max_entries:
            table.append(prev + entry[:1])
        prev = entry
    return bytes(out)


def decode_bible_data(data: bytes) -> str:
    """Decode ``bible.data`` of the Debian bible-kjv-text package into its plain text.

    Layout (big-endian): magic ``EC02`` and a description padded to 0x50; a 4-byte zero, the
    uncompressed block size, the number of blocks N, then N+1 file offsets.  The compressed
    stream starts with a compress(1) header (1f 9d 90: block mode, 16 bits); block i, which
    decodes to one block of text, lies between offsets i and i+1 and restarts the LZW table.
    """
    if data[:4] != b"EC02":
        raise BuildError("bible.data: unknown format %r" % data[:24])
    _, block_size, n_blocks = struct.unpack(">III", data[0x50:0x5C])
    offsets = struct.unpack(">%dI" % (n_blocks + 1), data[0x5C : 0x5C + 4 * (n_blocks + 1)])
    header_at = 0x5C + 4 * (n_blocks + 1)
    if data[header_at : header_at + 2] != b"\x1f\x9d" or offsets[0] != header_at + 3:
        raise BuildError("bible.data: no compress(1) header where expected")
    maxbits = data[header_at + 2] & 0x1F
    parts = []
    for i in range(n_blocks):
        block = unlzw(data[offsets[i] : offsets[i + 1]], maxbits)
        if len(block) != block_size and i != n_blocks - 1:
            raise BuildError("bible.data: block %d decoded to %d bytes" % (i, len(block)))
        parts.append(block)
    return b"".join(parts).decode("ascii")


_VERSE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def kjv_chapters(text: str) -> list[Chapter]:
    """[(book name, chapter, [(verse, text), ...]), ...] in canonical order."""
    lines = text.split("\n")
    if not lines[0].startswith("Holy Bible"):
        raise BuildError("bible.data: unexpected first line %r" % lines[0])
    abbrevs: list[str] = []
    chapters: list[tuple[str, int, list[tuple[int, str]]]] = []
    for line in lines[1:]:
        if not line:
            continue
        m = _VERSE.match(line)
        if not m:
            raise BuildError("bible.data: unexpected line %r" % line[:80])
        ab, ch, vs, body = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if not abbrevs or abbrevs[-1] != ab:
            abbrevs.append(ab)
        name_index = len(abbrevs) - 1
        if not chapters or chapters[-1][0] != str(name_index) or chapters[-1][1] != ch:
            chapters.append((str(name_index), ch, []))
        chapters[-1][2].append((vs, body))
    if len(abbrevs) != len(KJV_BOOK_NAMES):
        raise BuildError("bible.data: found %d books, expected 66" % len(abbrevs))
    return [(KJV_BOOK_NAMES[int(i)], ch, verses) for i, ch, verses in chapters]


def build_books(chapters: list[Chapter]) -> list[JsonObj]:
    docs = []
    for book, ch, verses in chapters:
        if book not in KJV_BOOKS_KEPT:
            continue
        body = "\n".join("%d %s" % (v, t) for v, t in verses)
        docs.append({"text": "%s %d\n\n%s\n" % (book, ch, body)})
    return docs


# --------------------------------------------------------------------------------------------
# korean.jsonl


_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_KO_CHAPTER_LINK = re.compile(r'<span class="chapter"><a href="([^"#]+\.ko\.html)"')


def faq_ko_pages(html_dir: Path) -> list[Path]:
    """The chapter pages of the HTML FAQ in book order (the order of the index's contents)."""
    index = (html_dir / "index.ko.html").read_text(encoding="utf-8")
    order = list(dict.fromkeys(_KO_CHAPTER_LINK.findall(index)))
    found = sorted(p.name for p in html_dir.glob("*.ko.html") if p.name != "index.ko.html")
    if not order or sorted(order) != found:
        raise BuildError("package layout changed: the contents of %s/index.ko.html list %s, "
                         "the folder holds %s" % (html_dir, order, found))
    return [html_dir / name for name in order]


def korean_text(blocks: list[Block]) -> str:
    """Render FAQ blocks with one line per paragraph (the HTML has no fixed-width wrapping).

    Headings, paragraphs, terms, definitions and code blocks are separated by a blank line;
    consecutive list items (and the table of contents' entries) are on consecutive lines.
    ``<pre>`` text is kept verbatim.
    """
    out: list[str] = []
    prev: Block | None = None
    for b in blocks:
        if prev is not None:
            if b.kind in ("li", "dt") and prev.kind in ("li", "dt"):
                out.append("\n")
            else:
                out.append("\n\n")
        out.append(b.text)
        prev = b
    return "".join(out) + "\n"


def build_korean(html_dir: Path) -> list[JsonObj]:
    """The Korean FAQ from its HTML pages: the front matter, then one document per section.

    The first document is the index page without its navigation bar: title, version, the
    copyright and permission notice, abstract and table of contents.  Each chapter page is
    split at every heading (chapter, section, subsection); a part that is only a heading (a
    chapter title directly followed by its first section, ...) is joined to the next part.
    """
    front = [b for b in parse_html(html_dir / "index.ko.html", keep_nav=True).blocks
             if b.kind not in ("nav", "footer")]
    if not any("허가 고지" in b.text for b in front):
        raise BuildError("package layout changed: no permission notice in %s/index.ko.html"
                         % html_dir)
    docs: list[JsonObj] = [{"text": korean_text(front)}]
    for page in faq_ko_pages(html_dir):
        blocks = [b for b in parse_html(page, keep_nav=False).blocks
                  if b.kind not in ("nav", "footer")]
        parts: list[list[Block]] = []
        for b in blocks:
            if b.kind in _HEADINGS or not parts:
                parts.append([])
            parts[-1].append(b)
        carry: list[Block] = []
        for part in parts:
            part = carry + part
            if all(b.kind in _HEADINGS for b in part):
                carry = part  # a heading alone: glue it to the next section
                continue
            carry = []
            docs.append({"text": korean_text(part)})
        if carry:
            docs.append({"text": korean_text(carry)})
    return docs


# --------------------------------------------------------------------------------------------
# sft.jsonl


@dataclass
class SftPair:
    key: str
    input: str
    output: str


_NUM_PREFIX = re.compile(r"^\d+(?:\.\d+)*\.\s+")


def sections_by_heading(
    blocks: list[Block], levels: tuple[str, ...]
) -> list[tuple[Block, list[Block]]]:
    """[(heading, blocks up to the next heading of any level), ...] for headings in ``levels``."""
    out: list[tuple[Block, list[Block]]] = []
    current: tuple[Block, list[Block]] | None = None
    for b in blocks:
        if b.kind in ("h1", "h2", "h3", "h4", "h5", "h6"):
            current = (b, []) if b.kind in levels else None
            if current is not None:
                out.append(current)
        elif current is not None and b.kind not in ("nav", "footer"):
            current[1].append(b)
    return out


def answer_text(blocks: list[Block]) -> str:
    return strip_pilcrow(blocks_to_text(blocks)).strip("\n")


def sft_korean_faq(html_dir: Path) -> list[SftPair]:
    pairs = []
    for page in sorted(html_dir.glob("*.ko.html")):
        if page.name == "index.ko.html":
            continue
        blocks = parse_html(page, keep_nav=False).blocks
        for head, body in sections_by_heading(blocks, ("h2", "h3")):
            title = _NUM_PREFIX.sub("", head.text).strip()
            answer = answer_text(body)
            if not answer or len(answer) > SFT_MAX_OUTPUT:
                continue
            if title.endswith("?"):
                prompt = "다음 질문에 답하세요: " + title
            else:
                prompt = "데비안 FAQ의 '%s' 항목을 설명하세요." % title
            pairs.append(SftPair("ko:%s#%s" % (page.name, head.anchor or title), prompt, answer))
    return pairs


def sft_python_docs(doc_root: Path) -> list[SftPair]:
    pairs: list[SftPair] = []
    # Python FAQ: question headings -> answers
    for page in sorted((doc_root / "faq").glob("*.html")):
        blocks = parse_html(page, keep_nav=False).blocks
        for head, body in sections_by_heading(blocks, ("h3", "h4")):
            q = strip_pilcrow(head.text)
            answer = answer_text(body)
            if q.endswith("?") and answer and len(answer) <= SFT_MAX_OUTPUT:
                pairs.append(SftPair("pyfaq:%s#%s" % (page.name, q), q, answer))
    # glossary: term -> definition
    blocks = parse_html(doc_root / "glossary.html", keep_nav=False).blocks
    term = ""
    definition: list[Block] = []

    def flush_term() -> None:
        if term and definition:
            pairs.append(SftPair("glossary:" + term,
                                 "What does the term \u201c%s\u201d mean in Python?" % term,
                                 answer_text(definition)))

    for b in blocks:
        if b.kind == "dt" and "glossary" in b.dl_class:
            flush_term()
            term, definition = strip_pilcrow(b.text), []
        elif b.in_dd and term:
            definition.append(b)
        elif b.kind.startswith("h") or b.kind == "footer":
            flush_term()
            term, definition = "", []
    flush_term()
    # library reference: module title -> the page's introduction
    for page in sorted((doc_root / "library").glob("*.html")):
        blocks = parse_html(page, keep_nav=False).blocks
        h1 = next((b for b in blocks if b.kind == "h1"), None)
        if h1 is None:
            continue
        m = re.match(r"^(\S+) \u2014 (.+)$", strip_pilcrow(h1.text))
        if not m:
            continue
        intro: list[Block] = []
        for b in blocks[blocks.index(h1) + 1 :]:
            if b.kind.startswith("h") or b.kind in ("dt", "footer"):
                break
            if b.text.startswith("Source code:") or b.text.startswith("Availability"):
                continue
            intro.append(b)
        answer = answer_text(intro)
        if len(answer) >= 80 and len(answer) <= SFT_MAX_OUTPUT:
            mod = m.group(1)
            prompt = "What is the `%s` module of the Python standard library for?" % mod
            pairs.append(SftPair("pymod:" + mod, prompt, answer))
    return pairs


_SFT_CODE_PROMPTS = (
    "Write a Python function `{sig}` that does the following:\n\n{doc}",
    "Implement `{sig}` in Python.\n\nDocstring:\n{doc}",
    "{doc}\n\nWrite this as a Python function named `{name}`.",
)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    prefix = "async def " if isinstance(node, ast.AsyncFunctionDef) else ""
    return "%s%s(%s)" % (prefix, node.name, ast.unparse(node.args))


def sft_stdlib_functions(root: Path) -> list[SftPair]:
    """Docstring -> function body (docstring removed) for stdlib functions and methods."""
    pairs: list[SftPair] = []
    for path in stdlib_sources(root):
        rel = path.relative_to(root).as_posix()
        text = read_source(path)
        if text is None:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        candidates: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                candidates.append((n.name, n))
            elif isinstance(n, ast.ClassDef):
                for m in n.body:
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        candidates.append(("%s.%s" % (n.name, m.name), m))
        for qual, fn in candidates:
            key = "code:%s::%s" % (rel, qual)
            if stable_fraction("sft-" + key) >= SFT_CODE_RATE:
                continue
            doc = ast.get_docstring(fn)
            if not doc or len(doc) < 20 or len(fn.body) < 2:
                continue
            ds = fn.body[0]
            start, end = node_span(fn)
            ds_end = ds.end_lineno or ds.lineno
            if ds.lineno <= fn.lineno or fn.body[1].lineno <= ds_end:
                continue  # docstring shares a line with code: cannot cut it out cleanly
            kept = lines[start - 1 : ds.lineno - 1] + lines[ds_end:end]
            body = textwrap.dedent("".join(kept))
            if len(body) > SFT_CODE_MAX_OUTPUT or body.count("\n") < 3:
                continue
            n_tpl = len(_SFT_CODE_PROMPTS)
            template = _SFT_CODE_PROMPTS[int(stable_fraction("tpl-" + key) * n_tpl)]
            prompt = template.format(sig=_signature(fn), name=fn.name, doc=doc)
            pairs.append(SftPair(key, prompt, body.rstrip("\n") + "\n"))
    return pairs


def sft_kjv(chapters: list[Chapter]) -> list[SftPair]:
    """Short pairs: a Bible reference -> its verses, or a verse -> the verses that follow."""
    pairs = []
    for book, ch, verses in chapters:
        key = "kjv:%s %d" % (book, ch)
        if stable_fraction("sft-" + key) >= SFT_KJV_RATE:
            continue
        n = 1 + int(stable_fraction("len-" + key) * min(4, len(verses)))
        first = int(stable_fraction("start-" + key) * (len(verses) - n + 1))
        group = verses[first : first + n]
        if stable_fraction("kind-" + key) < 0.5 or len(group) < 2:
            ref = "%s %d:%d" % (book, ch, group[0][0])
            if len(group) > 1:
                ref += "-%d" % group[-1][0]
            prompt = "Quote %s from the King James Bible." % ref
            answer = "\n".join("%d %s" % v for v in group)
        else:
            prompt = ("Continue this passage from the King James Bible (%s %d):\n\n%d %s"
                      % (book, ch, group[0][0], group[0][1]))
            answer = "\n".join("%d %s" % v for v in group[1:])
        pairs.append(SftPair(key, prompt, answer))
    return pairs


def build_sft(
    faq_html: Path, doc_root: Path, stdlib: Path, chapters: list[Chapter]
) -> tuple[list[JsonObj], dict[str, int]]:
    groups = {
        "korean_faq": sft_korean_faq(faq_html),
        "python_docs": sft_python_docs(doc_root),
        "stdlib_functions": sft_stdlib_functions(stdlib),
        "kjv_verses": sft_kjv(chapters),
    }
    pairs = [p for g in groups.values() for p in g]
    seen: set[str] = set()
    unique = []
    for p in sorted(pairs, key=lambda p: (hashlib.sha256(p.key.encode()).hexdigest(), p.key)):
        if p.key in seen or not p.input.strip() or not p.output.strip():
            continue
        seen.add(p.key)
        unique.append({"input": p.input, "output": p.output})
    return unique, {k: len(v) for k, v in groups.items()}


# --------------------------------------------------------------------------------------------
# manifest, README, --check

FILE_KEYS: dict[str, tuple[str, ...]] = {
    "web.jsonl": ("text",),
    "code.jsonl": ("text",),
    "books.jsonl": ("text",),
    "korean.jsonl": ("text",),
    "sft.jsonl": ("input", "output"),
}


def file_stats(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """documents / bytes / sha256 of a jsonl file; raises BuildError on a malformed line."""
    data = path.read_bytes()
    docs = 0
    if data and not data.endswith(b"\n"):
        raise BuildError("%s: does not end with a newline" % path.name)
    for i, raw in enumerate(data.split(b"\n")[:-1] if data else [], 1):
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BuildError("%s:%d: not a JSON line (%s)" % (path.name, i, exc)) from None
        if not isinstance(obj, dict) or tuple(sorted(obj)) != tuple(sorted(keys)):
            got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            raise BuildError("%s:%d: keys %s, expected %s" % (path.name, i, got, list(keys)))
        if not all(isinstance(obj[k], str) and obj[k].strip() for k in keys):
            raise BuildError("%s:%d: empty or non-string field" % (path.name, i))
        docs += 1
    return {"documents": docs, "bytes": len(data), "sha256": sha256_bytes(data)}


def recompute(data_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The parts of the manifest that can be recomputed from the files alone."""
    out: dict[str, Any] = {"files": {}, "licenses": {}}
    for name in manifest.get("files", {}):
        keys = FILE_KEYS.get(name, tuple(manifest["files"][name].get("keys", ())))
        path = data_dir / name
        out["files"][name] = file_stats(path, keys) if path.exists() else None
    for name in manifest.get("licenses", {}):
        path = data_dir / name
        out["licenses"][name] = sha256_bytes(path.read_bytes()) if path.exists() else None
    return out


def check(data_dir: Path) -> int:
    try:
        manifest = json.loads((data_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print("check: cannot read %s: %s" % (data_dir / MANIFEST_NAME, exc), file=sys.stderr)
        return 1
    problems: list[str] = []
    missing = sorted(set(FILE_KEYS) - set(manifest.get("files", {})))
    problems += ["%s is not in the manifest" % n for n in missing]
    try:
        now = recompute(data_dir, manifest)
    except BuildError as exc:
        print("check: %s" % exc, file=sys.stderr)
        return 1
    for name, stats in now["files"].items():
        want = manifest["files"][name]
        if stats is None:
            problems.append("%s is missing" % name)
            continue
        for k in ("documents", "bytes", "sha256"):
            if stats[k] != want.get(k):
                problems.append("%s: %s is %s, manifest says %s" % (name, k, stats[k], want.get(k)))
    for name, digest in now["licenses"].items():
        if digest != manifest["licenses"][name]:
            problems.append(
                "%s: sha256 %s, manifest says %s" % (name, digest, manifest["licenses"][name])
            )
    readme = data_dir / README_NAME
    if not readme.exists() or readme.read_text(encoding="utf-8") != render_readme(manifest):
        problems.append("README.md does not match the manifest (rebuild with make data)")
    for p in problems:
        print("check: " + p, file=sys.stderr)
    if not problems:
        print("check: %d files and %d licence files agree with %s"
              % (len(now["files"]), len(now["licenses"]), MANIFEST_NAME))
    return 1 if problems else 0


def human(n: int) -> str:
    return "%.2f MB" % (n / 1e6) if n >= 100_000 else "%.1f KB" % (n / 1e3)


def render_readme(manifest: dict[str, Any]) -> str:
    """data/README.md, generated from the manifest so the two cannot drift apart."""
    files = manifest["files"]
    rows = "\n".join(
        "| `%s` | %s | %s | %s | %s |" % (
            name, f["documents"], human(f["bytes"]),
            ", ".join("`%s` %s" % (s["package"], s["version"]) for s in f["sources"]),
            f["licence_short"],
        )
        for name, f in files.items()
    )
    total = sum(f["bytes"] for f in files.values())
    sections = []
    for name, f in files.items():
        src = "\n".join(
            "  - `%s` version `%s`: `%s`%s" % (
                s["package"], s["version"], s["path"],
                " (.deb sha256 `%s`)" % s["deb_sha256"] if s.get("deb_sha256") else "")
            for s in f["sources"])
        sections.append(
            "### `%s`\n\n%s\n\n- Documents: %d; size: %s (%d bytes); sha256 `%s`\n"
            "- Keys: %s\n- Sources:\n%s\n- Processing: %s\n- Licence: %s\n"
            % (name, f["description"], f["documents"], human(f["bytes"]), f["bytes"],
               f["sha256"], ", ".join("`%s`" % k for k in f["keys"]), src,
               f["processing"], f["licence"])
            + ("\n" + README_NOTES[name] + "\n" if name in README_NOTES else "")
        )
    licences = "\n".join("- `%s` (sha256 `%s`)" % (n, d) for n, d in manifest["licenses"].items())
    extra = ""
    if manifest.get("sft_groups"):
        extra = "SFT pairs by origin: " + ", ".join(
            "%s %d" % (k, v) for k, v in manifest["sft_groups"].items()) + ".\n\n"
    return README_TEMPLATE.format(
        rows=rows, total=human(total), sections="\n".join(sections), licences=licences,
        python=manifest["python"], extra=extra,
    )


#: Paragraphs after a file's section: how the workbook uses the file beyond its own lines (not in the manifest).
README_NOTES: dict[str, str] = {
    "sft.jsonl": (
        "Chapter 4 also builds multi-turn chat conversations from these pairs, with no file of their own\n"
        "(`labsupport.datasets.chat_sft.conversations_from_pairs`): walking the pairs in order, each\n"
        "conversation takes the next 1-3 of them (a seeded draw) as user/assistant turns after an optional\n"
        "system message, so every pair is used once and the sources and licences above apply unchanged."
    ),
}


README_TEMPLATE = """\
# data/: the workbook's small corpora

<!-- Generated by scripts/build_data.py from MANIFEST.json; edit the script, not this file. -->

Five small JSON Lines corpora for the data-path chapters (tokenizer, preprocessing, blending,
SFT packing). Each line is one UTF-8 JSON object, written with `ensure_ascii=False` (U+2028,
U+2029 and U+0085 are escaped); files end with a newline and use LF line ends. Text is kept
exactly as extracted: whitespace, tabs and line breaks inside documents are not normalised,
so the tokenizer chapter can check lossless round-trips of code indentation and Korean.

| file | documents | size | source (Debian package or Python) | licence |
|---|---|---|---|---|
{rows}

Total: {total}.

{extra}## Rebuilding

```
make data                      # = .venv/bin/python scripts/build_data.py
python scripts/build_data.py --check   # recompute the manifest from data/; exit 1 if it differs
```

The build needs `apt-get` and `dpkg-deb` (a Debian or Ubuntu machine with access to the Debian
archive) and the workbook's Python; `--deb-dir DIR` takes the `.deb` files from `DIR` instead of
downloading them. The workbook itself never downloads anything. The script asks for the pinned
package versions listed below, takes whatever is current if those are gone (with a warning),
and records the versions used in `MANIFEST.json`. It is deterministic: two runs with the same
package versions and the same Python give byte-identical files. `code.jsonl` and part of
`sft.jsonl` come from the standard library of the Python that runs the script (here Python
{python}); the documents are chosen by their module path and definition name, not by content,
so another 3.11.x release selects the same definitions, although their text may differ
slightly.

## Files

{sections}
## Licence notices

The copyright files of the Debian packages and the Python licence are copied verbatim into
`LICENSES/`, as the PSF licence and the Debian FAQ's permission notice require the notices to
be kept with copies and derived works:

{licences}

The Korean FAQ's own copyright and permission notice (in Korean) is also kept as the first
document of `korean.jsonl`. The Python documentation pages say that examples, recipes and other
code in the documentation are additionally licensed under the Zero Clause BSD licence. The
`bible-kjv-text` copyright file covers the Bible Retrieval System software (free use provided
its legend is kept; parts GPL-2+) and states that the King James text itself is out of
copyright; only the text is used here.
"""


# --------------------------------------------------------------------------------------------
# main build


def serialise(docs: list[JsonObj]) -> bytes:
    return "".join(jsonl_line(d) for d in docs).encode("utf-8")


@dataclass
class _Extracted:
    """What the Debian packages and the stdlib gave: the corpora (documents), licences, sources."""

    pkgs: dict[str, "Package"]
    stdlib: Path
    corpora: dict[str, Any]
    sft_groups: Any
    n_chapters: int
    licences: dict[str, bytes]


def _extract(deb_dir: Path | None) -> _Extracted:
    """Phase 1: fetch the packages, check their layout, build every corpus in memory."""
    if deb_dir is not None:
        require_tools("dpkg-deb")
    else:
        require_tools("apt-get", "dpkg-deb")
    stdlib = stdlib_dir()
    licences: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="build_data.") as tmp:
        work = Path(tmp)
        pkgs = {name: fetch_package(name, work, deb_dir) for name in PACKAGES}
        pydoc, kjv, faq = pkgs["python3.11-doc"], pkgs["bible-kjv-text"], pkgs["debian-faq-ko"]
        doc_root = pydoc.root / PY_DOC_HTML
        faq_html = faq.root / FAQ_KO_HTML
        for p in (doc_root, faq_html, kjv.root / KJV_DATA):
            if not p.exists():
                raise BuildError("package layout changed: %s is missing" % p)

        print("web: extracting text from %s ..." % PY_DOC_HTML, file=sys.stderr)
        web = build_web(doc_root)
        print("code: reading %s ..." % stdlib, file=sys.stderr)
        code, _ = build_code(stdlib)
        print("books: decoding %s ..." % KJV_DATA, file=sys.stderr)
        chapters = kjv_chapters(decode_bible_data((kjv.root / KJV_DATA).read_bytes()))
        n_chapters = len(chapters)
        books = build_books(chapters)
        print("korean: extracting text from %s ..." % FAQ_KO_HTML, file=sys.stderr)
        korean = build_korean(faq_html)
        print("sft: building pairs ...", file=sys.stderr)
        sft, sft_groups = build_sft(faq_html, doc_root, stdlib, chapters)

        for name, pkg in pkgs.items():
            licences["%s/%s.copyright" % (LICENSES_DIR, name)] = (
                pkg.root / "usr/share/doc" / name / "copyright").read_bytes()
        lic = stdlib / "LICENSE.txt"
        if not lic.exists():
            raise BuildError("%s is missing (needed as the stdlib's licence notice)" % lic)
        licences["%s/python-stdlib-LICENSE.txt" % LICENSES_DIR] = lic.read_bytes()

    return _Extracted(pkgs, stdlib, {"web": web, "code": code, "books": books, "korean": korean, "sft": sft},
                      sft_groups, n_chapters, licences)


def _describe(ex: _Extracted) -> dict[str, dict[str, Any]]:
    """Phase 2: each output file's documents with its description, sources, processing and licence."""
    pyver = platform.python_version()
    pydoc, kjv, faq = ex.pkgs["python3.11-doc"], ex.pkgs["bible-kjv-text"], ex.pkgs["debian-faq-ko"]
    web, code, books, korean, sft = (ex.corpora[k] for k in ("web", "code", "books", "korean", "sft"))
    n_chapters = ex.n_chapters

    def src(pkg: Package, path: str) -> dict[str, str]:
        return {"package": pkg.name, "version": pkg.version, "path": path,
                "deb_sha256": pkg.deb_sha256}

    py_src = {"package": "python (standard library)", "version": pyver,
              "path": "sysconfig.get_paths()['stdlib']"}
    meta: dict[str, dict[str, Any]] = {
        "web.jsonl": {
            "docs": web,
            "description": "Web-like pages: the text of the Python 3.11 documentation's "
                           "HTML pages.",
            "sources": [src(pydoc, PY_DOC_HTML + "/**/*.html")],
            "processing": (
                "HTML parsed with html.parser; the first navigation bar kept as one line, "
                "sidebar/scripts dropped; ASCII whitespace collapsed outside <pre>, <pre> kept "
                "verbatim; headings keep their \u00b6 permalink signs and the footer is kept. "
                "Pages "
                "longer than %d characters are split at their h2 sections. genindex*, search "
                "and the module index are skipped. A document is kept when sha256('web:' + "
                "page path [+ '#' + section number]) falls in the first %.1f%% of the hash range."
                % (WEB_SPLIT_CHARS, WEB_RATE * 100)),
            "licence": LICENCE_PSF + " (see LICENSES/python3.11-doc.copyright)",
            "licence_short": "PSF-2.0",
        },
        "code.jsonl": {
            "docs": code,
            "description": "Python source code from the standard library of Python %s." % pyver,
            "sources": [py_src],
            "processing": (
                "Files sorted by path; tests, demos, site-packages and generated files "
                "excluded. Files up to %d bytes are one document; larger files are split "
                "into the text before their first top-level def/class and one document per "
                "top-level def/class (decorators included), cut at line boundaries so "
                "indentation is untouched. A unit is kept when sha256('code:' + path "
                "[+ '::' + name]) falls in the first %.0f%% of the hash range. The "
                "tab-indented %s are always included."
                % (CODE_WHOLE_FILE_BYTES, CODE_RATE * 100, ", ".join(CODE_EXTRA_GLOBS))),
            "licence": LICENCE_PSF + " (see LICENSES/python-stdlib-LICENSE.txt, the "
                       "LICENSE.txt of Python %s)" % pyver,
            "licence_short": "PSF-2.0",
        },
        "books.jsonl": {
            "docs": books,
            "description": "The King James Bible: %d whole books, one chapter per document."
                           % len(KJV_BOOKS_KEPT),
            "sources": [src(kjv, KJV_DATA)],
            "processing": (
                "bible.data (the bible-kjv program's format: a table of block offsets, then "
                "compress(1)-style LZW blocks) decoded in pure Python; after its one header "
                "line the result is byte-identical to the output of `bible -f "
                "Gen1:1-Rev22:21` (Debian's bible-kjv 4.38 program). "
                "%d chapters in all; kept: %s. Each document is 'Book N', a blank line, "
                "then one line per verse, 'verse-number text'."
                % (n_chapters, ", ".join(KJV_BOOKS_KEPT))),
            "licence": LICENCE_KJV + "; the package's copyright file (LICENSES/"
                       "bible-kjv-text.copyright) states the KJV text's copyright has expired",
            "licence_short": "public domain",
        },
        "korean.jsonl": {
            "docs": korean,
            "description": "The Debian GNU/Linux FAQ in Korean (version 11.0, 2021): the text "
                           "of its HTML pages, one section per document.",
            "sources": [src(faq, FAQ_KO_HTML + "/*.ko.html")],
            "processing": (
                "HTML parsed with html.parser (the same converter as web.jsonl); navigation "
                "bars and the chapters' own tables of contents dropped. ASCII whitespace "
                "collapsed outside <pre>, so each paragraph is one line (the HTML's source line "
                "breaks fall between words; the plain-text FAQ, hard-wrapped at a fixed width, "
                "breaks Korean words and is not used); <pre> kept verbatim. Headings, "
                "paragraphs, terms, definitions and code blocks are separated by a blank line; "
                "list items ('* ' before an item's first paragraph) and the entries of the "
                "table of contents are on consecutive lines. The first document is the index "
                "page: title, copyright and permission notice, abstract, table of contents. "
                "Chapter pages in the order of the table of contents, split at every heading "
                "(chapter, section, subsection); a heading with no text of its own is joined "
                "to the next section; footnotes stay with the chapter's last section."),
            "licence": LICENCE_SPI + " (see LICENSES/debian-faq-ko.copyright)",
            "licence_short": "SPI notice (verbatim/modified copies allowed, notice kept)",
        },
        "sft.jsonl": {
            "docs": sft,
            "description": ("Supervised fine-tuning pairs in seed 001's shape: "
                            '{"input": prompt, "output": answer}.'),
            "sources": [src(faq, FAQ_KO_HTML + "/*.ko.html"),
                        src(pydoc, PY_DOC_HTML + "/{faq/*,glossary,library/*}.html"),
                        py_src, src(kjv, KJV_DATA)],
            "processing": (
                "Korean FAQ: each section heading of the HTML FAQ (number removed) -> the "
                "section's text ('다음 질문에 답하세요: ...' for questions). Python FAQ: "
                "question "
                "headings -> answers. Glossary: term -> definition. Library pages: module name "
                "-> the page's introduction. Standard library: the docstring of %.0f%% of "
                "functions and methods (chosen by hash of path and name) -> the function's "
                "source without the docstring (dedented; at most %d characters), with one of "
                "%d prompt wordings. King James Bible: %.0f%% of chapters (by hash) give one "
                "pair, a reference -> 1-4 verses, or a verse -> the verses after it. Answers "
                "longer than %d characters are dropped. Pairs are "
                "ordered by sha256 of their origin key, which mixes the sources."
                % (SFT_CODE_RATE * 100, SFT_CODE_MAX_OUTPUT, len(_SFT_CODE_PROMPTS),
                   SFT_KJV_RATE * 100, SFT_MAX_OUTPUT)),
            "licence": ("Derived from the sources above: PSF-2.0 for Python material; the SPI "
                        "notice for the Korean FAQ material; public domain for the KJV verses "
                        "(see LICENSES/)"),
            "licence_short": "PSF-2.0 + SPI notice + public domain",
        },
    }

    return meta


def _write(data_dir: Path, meta: dict[str, dict[str, Any]], licences: dict[str, bytes], sft_groups: Any) -> None:
    """Phase 3: serialise, write every file atomically, then the manifest and the README from it."""
    pyver = platform.python_version()
    outputs: dict[str, bytes] = {}
    manifest: dict[str, Any] = {
        "generator": "scripts/build_data.py",
        "python": pyver,
        "files": {},
        "licenses": {},
        "sft_groups": sft_groups,
    }
    for name, m in meta.items():
        data = serialise(m.pop("docs"))
        outputs[name] = data
        manifest["files"][name] = {"keys": list(FILE_KEYS[name]), **m}
    for name, blob in sorted(licences.items()):
        manifest["licenses"][name] = sha256_bytes(blob)

    # write everything under temporary names first, then compute stats from what was written
    for name, blob in sorted(licences.items()):
        atomic_write(data_dir / name, blob, file_mode=0o644)
    for name, blob in outputs.items():
        atomic_write(data_dir / name, blob, file_mode=0o644)
        stats = file_stats(data_dir / name, FILE_KEYS[name])
        manifest["files"][name] = {**stats, **manifest["files"][name]}
        print("%-13s %6d documents %9d bytes" % (name, stats["documents"], stats["bytes"]),
              file=sys.stderr)
    atomic_write(data_dir / MANIFEST_NAME,
                 (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8"), file_mode=0o644)
    atomic_write(data_dir / README_NAME, render_readme(manifest).encode("utf-8"), file_mode=0o644)




def build(data_dir: Path, deb_dir: Path | None) -> None:
    """Rebuild every file of data/ from offline sources: extract, describe, write."""
    ex = _extract(deb_dir)
    _write(data_dir, _describe(ex), ex.licences, ex.sft_groups)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="recompute the manifest from the files in data/ and exit 1 if it differs")
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR,
                    help="output folder (default: data/)")
    ap.add_argument("--deb-dir", type=Path, default=None,
                    help="take the .deb files from this folder instead of `apt-get download`")
    args = ap.parse_args(argv)
    if args.check:
        return check(args.data_dir)
    try:
        build(args.data_dir, args.deb_dir)
    except BuildError as exc:
        print("build_data: error: %s" % exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
