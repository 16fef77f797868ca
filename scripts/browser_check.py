"""Measure the chapter pages in a real browser: do wide tables and long lines fit a laptop's output area?

Issue 29 (item 5, "pages that fit a laptop"): every chapter notebook (0–6), with its committed outputs, is converted
with nbconvert's ``lab`` template (JupyterLab's own CSS, so a ``<pre>`` breaks anywhere, as in JupyterLab) and opened
in headless Chromium with a 960 px wide output area. A script injected into the page measures, for every table in
an output or a Markdown cell, its width against the area's and whether each column's header can be reached (on the
page, or inside a box that scrolls sideways); and for every line of text output, whether it is wider than the area
and so wrapped, and whether the wrap cut a word (a run of letters and digits) in two. The report goes back in the
dumped DOM; no driver, no network. With ``--lab`` the same measurement runs in JupyterLab itself (served on
localhost with throw-away settings, the file browser open, driven over Chromium's DevTools protocol; the window
starts at the reviewer's 1400 px and is narrowed until the output area is 960 px).

    python scripts/browser_check.py        # every notebooks/NN_*.ipynb → benchmarks/results/browser_check.json
    python scripts/browser_check.py notebooks/06_end_to_end.ipynb --screenshots /tmp/shots
    python scripts/browser_check.py --shot 06_end_to_end.ipynb:5 --screenshots /tmp/shots   # one cell, on its own
    python scripts/browser_check.py --css ".jp-OutputArea-output pre{word-break:normal}"   # try a CSS fix
    python scripts/browser_check.py --lab notebooks/06_end_to_end.ipynb                    # in JupyterLab itself

Exit status: 0 when no table (an output's or a Markdown cell's) hides a column or has a word cut in two, 1
otherwise (text lines cut mid-word are counted and listed; ``--strict-text`` makes them fail too), 2 when no
Chromium is found. ``make browser-check`` runs it; screenshots are for a person to look at, not compared.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "browser_check.json"
OUTPUT_WIDTH = 960           # px: JupyterLab's output area in a 1400 px window with the file browser open
WINDOW_HEIGHT = 4000
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1"]
REPORT_ID = "browser-check-report"

# Runs in the page once it is laid out. Writes its JSON into <script id=REPORT_ID type=application/json>.
MEASURE_JS = r"""
(function () {
  const WORD = /[\p{L}\p{N}]+/gu;
  function cellIndex(el) {
    const cell = el.closest('.jp-Cell');
    return cell ? Array.prototype.indexOf.call(document.querySelectorAll('.jp-Cell'), cell) : -1;
  }
  function lineTops(range) {
    const tops = new Set();
    for (const r of range.getClientRects()) { if (r.width > 0) tops.add(Math.round(r.top)); }
    return tops.size;
  }
  // words of the text node(s) under el that the layout split over two lines
  function cutWords(el, limit) {
    const cuts = [];
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const text = node.data;
      WORD.lastIndex = 0;
      let m;
      while ((m = WORD.exec(text))) {
        if (m[0].length < 2) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        if (lineTops(range) > 1) { cuts.push(m[0]); if (cuts.length >= limit) return cuts; }
      }
    }
    return cuts;
  }
  function scroller(el, stop) {
    for (let p = el.parentElement; p && p !== stop.parentElement; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if (ox === 'auto' || ox === 'scroll') return p;
    }
    return null;
  }
  function innerWidth(el) {
    const cs = getComputedStyle(el);
    return el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  }
  const report = {areas: [], tables: [], lines: {wrapped: 0, cut: 0, examples: []}};
  const areas = document.querySelectorAll('.jp-OutputArea-output, .jp-RenderedMarkdown');
  for (const area of areas) {
    const aRect = area.getBoundingClientRect();
    if (aRect.width === 0) continue;
    const aRight = aRect.left + area.clientLeft + area.clientWidth;
    const kind = area.classList.contains('jp-RenderedMarkdown') ? 'markdown' : 'output';
    if (kind === 'output') report.areas.push(Math.round(aRect.width));
    for (const table of area.querySelectorAll('table')) {
      const box = scroller(table, area);
      const boxFits = box && box !== area && box.getBoundingClientRect().right <= aRight + 1;
      let heads = table.querySelectorAll('thead th');
      if (!heads.length) heads = table.rows.length ? table.rows[0].cells : [];
      const hidden = [];
      for (const th of heads) {
        const r = th.getBoundingClientRect();
        if (r.right > aRight + 1 && !boxFits) hidden.push(th.textContent.trim());
      }
      const cuts = [];
      for (const c of table.querySelectorAll('th, td')) {
        cuts.push(...cutWords(c, 5 - cuts.length));
        if (cuts.length >= 5) break;
      }
      report.tables.push({
        cell: cellIndex(table), kind: kind,
        columns: heads.length,
        width: Math.round(table.getBoundingClientRect().width),
        scroll_width: Math.round(table.scrollWidth),
        area_width: Math.round(innerWidth(area)),
        scrolls: !!(boxFits && table.getBoundingClientRect().width > box.clientWidth + 1),
        hidden_columns: hidden,
        cut_words: cuts,
      });
    }
    if (kind === 'output') {
      for (const pre of area.querySelectorAll('pre')) {
        // one range per source line: more than one line box = wider than the area, wrapped
        const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
        const nodes = []; let n; while ((n = walker.nextNode())) nodes.push(n);
        const text = nodes.map(x => x.data).join('');
        if (!text) continue;
        const lineHeight = parseFloat(getComputedStyle(pre).lineHeight) || 17;
        const sourceLines = text.split('\n').length;
        if (pre.getBoundingClientRect().height <= sourceLines * lineHeight + 2) continue;   // nothing wrapped
        let offset = 0;
        const locate = (pos) => {   // [text node, offset] of a character offset in the <pre>'s text
          let acc = 0;
          for (const x of nodes) { if (pos <= acc + x.data.length) return [x, pos - acc]; acc += x.data.length; }
          const last = nodes[nodes.length - 1];
          return [last, last.data.length];
        };
        for (const line of text.split('\n')) {
          const start = offset, end = offset + line.length; offset = end + 1;
          if (!line.trim()) continue;
          const range = document.createRange();
          const [sn, so] = locate(start), [en, eo] = locate(end);
          range.setStart(sn, so); range.setEnd(en, eo);
          if (lineTops(range) <= 1) continue;
          report.lines.wrapped += 1;
          // a word of this line that spans two line boxes is cut mid-word
          WORD.lastIndex = 0; let m, cut = null;
          while ((m = WORD.exec(line))) {
            if (m[0].length < 2) continue;
            const r = document.createRange();
            const [a, ao] = locate(start + m.index), [b, bo] = locate(start + m.index + m[0].length);
            r.setStart(a, ao); r.setEnd(b, bo);
            if (lineTops(r) > 1) { cut = m[0]; break; }
          }
          if (cut) {
            report.lines.cut += 1;
            if (report.lines.examples.length < 40) {
              report.lines.examples.push({cell: cellIndex(pre), word: cut, line: line.slice(0, 160)});
            }
          }
        }
      }
    }
  }
  const out = document.createElement('script');
  out.type = 'application/json'; out.id = '""" + REPORT_ID + r"""';
  out.textContent = JSON.stringify(report).replace(/</g, '\\u003c');
  document.body.appendChild(out);
})();
"""

# Shows only the cell named in the page's #cell=N (for a screenshot of one table).
SHOT_JS = r"""
(function () {
  const m = /cell=(\d+)/.exec(location.hash); if (!m) return;
  const cells = document.querySelectorAll('.jp-Cell');
  cells.forEach((c, i) => { if (i !== Number(m[1])) c.style.display = 'none'; });
})();
"""


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium to run: ``explicit``, $CHROMIUM, or the first of chromium/chromium-browser/google-chrome on PATH."""
    for name in (explicit, os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


def chromium_version(chromium: str) -> str:
    out = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def to_html(notebook: Path, dest: Path, output_width: int, extra_css: str = "") -> Path:
    """``notebook`` with its committed outputs as nbconvert's lab HTML, offline, sized and measured (see MEASURE_JS)."""
    import nbformat  # noqa: PLC0415 - nbconvert only when a page is built (the module imports without it)
    from nbconvert import HTMLExporter  # noqa: PLC0415 - as above

    nb = nbformat.read(notebook, as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    body = re.sub(r'<script[^>]*src="https?://[^"]*"[^>]*>\s*</script>', "", body)   # no network here: no CDN scripts
    # The notebook column is sized so that each output area is exactly output_width wide (the prompt column and the
    # paddings come on top of it: measured, not assumed, in _calibrate).
    style = (f"<style>body{{margin:0}} .jp-Notebook{{width:var(--bc-notebook-width, {output_width + 200}px);"
             "max-width:none;box-sizing:border-box}" + extra_css + "</style>")
    body = body.replace("</head>", style + "</head>", 1)
    body = body.replace("</body>", f"<script>{SHOT_JS}</script><script>{MEASURE_JS}</script></body>", 1)
    dest.write_text(body, encoding="utf-8")
    return dest


def _run_chromium(chromium: str, args: list[str], profile: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def measure(chromium: str, page: Path, window_width: int, profile: Path) -> dict:
    """Open ``page`` in headless Chromium and return the report its script wrote into the DOM."""
    done = _run_chromium(chromium, [f"--window-size={window_width},{WINDOW_HEIGHT}", "--virtual-time-budget=5000",
                                    "--dump-dom", page.as_uri()], profile)
    m = re.search(rf'<script type="application/json" id="{REPORT_ID}">(.*?)</script>', done.stdout, re.S)
    if not m:
        raise RuntimeError(f"no report from Chromium for {page.name} (exit {done.returncode}): {done.stderr[-600:]}")
    return json.loads(html.unescape(m.group(1)) if "&quot;" in m.group(1) else m.group(1))


def screenshot(chromium: str, page: Path, window_width: int, profile: Path, png: Path, cell: int | None = None,
               height: int = WINDOW_HEIGHT) -> Path:
    url = page.as_uri() + (f"#cell={cell}" if cell is not None else "")
    _run_chromium(chromium, [f"--window-size={window_width},{height}", "--virtual-time-budget=5000",
                             f"--screenshot={png}", url], profile)
    return png


def _set_notebook_width(page: Path, px: int) -> None:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"var\(--bc-notebook-width, \d+px\)", f"var(--bc-notebook-width, {px}px)", text, count=1)
    page.write_text(text, encoding="utf-8")


def _calibrate(chromium: str, page: Path, output_width: int, profile: Path) -> tuple[dict, int]:
    """Measure ``page``; widen or narrow the notebook column until its output areas are ``output_width`` wide."""
    notebook_width = output_width + 200
    for _ in range(3):
        report = measure(chromium, page, notebook_width + 40, profile)
        widths = [w for w in report["areas"] if w > 0]
        area = max(set(widths), key=widths.count) if widths else output_width
        if abs(area - output_width) <= 1:
            return report, notebook_width
        notebook_width += output_width - area
        _set_notebook_width(page, notebook_width)
    return report, notebook_width


def _display_name(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path.name


def check_notebook(chromium: str, notebook: Path, workdir: Path, output_width: int = OUTPUT_WIDTH,
                   shots: Path | None = None, extra_css: str = "") -> dict:
    """Build, open and measure one notebook's page; one entry of the results file."""
    page = to_html(notebook, workdir / f"{notebook.stem}.html", output_width, extra_css)
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
    report, notebook_width = _calibrate(chromium, page, output_width, profile)
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
        screenshot(chromium, page, notebook_width + 40, profile, shots / f"{notebook.stem}.png")
    return _entry(notebook, report, notebook_width + 40)


def _entry(notebook: Path, report: dict, window_width: int) -> dict:
    tables = report["tables"]
    output_tables = [t for t in tables if t["kind"] == "output"]
    widest = max(tables, key=lambda t: t["width"], default=None)
    return {
        "notebook": _display_name(notebook),
        "renderer": "nbconvert lab template",
        "outputs": "committed" if _display_name(notebook) != notebook.name else "a copy outside the repository",
        "output_area_px": max(set(report["areas"]), key=report["areas"].count) if report["areas"] else None,
        "window_width_px": window_width,
        "tables_measured": len(tables),
        "output_tables": len(output_tables),
        "widest_table": widest and {k: widest[k] for k in ("cell", "kind", "width", "area_width", "scrolls")},
        "tables_wider_than_area": [{k: t[k] for k in ("cell", "kind", "width", "scrolls")}
                                   for t in tables if t["width"] > t["area_width"] + 1],
        "hidden_columns": [{"cell": t["cell"], "kind": t["kind"], "columns": t["hidden_columns"]}
                           for t in tables if t["hidden_columns"]],
        "table_cut_words": [{"cell": t["cell"], "kind": t["kind"], "words": t["cut_words"]}
                            for t in tables if t["cut_words"]],
        "text_lines_wrapped": report["lines"]["wrapped"],
        "text_lines_cut_mid_word": report["lines"]["cut"],
        "text_cut_examples": report["lines"]["examples"],
    }


class JupyterLab:
    """A JupyterLab server on localhost for the page check (``--lab``): its own home, settings and runtime folders
    in ``workdir`` (the user's are not read or written), every cell rendered at once (windowingMode none), a token,
    no browser of its own. The notebooks are copies in ``workdir/root``."""

    def __init__(self, workdir: Path, port: int = 0):
        self.workdir, self.root = workdir, workdir / "root"
        self.port = port or _free_port()
        self.token = os.urandom(8).hex()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "JupyterLab":
        home = self.workdir / "home"
        settings = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "notebook-extension"
        settings.mkdir(parents=True)
        (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}', encoding="utf-8")
        self.root.mkdir()
        env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
               "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_PLATFORM_DIRS": "1"}
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
               f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.root}", "--allow-root"]
        self.log = open(self.workdir / "lab.log", "w", encoding="utf-8")  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status?token={self.token}", timeout=2):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"jupyter lab did not start: {(self.workdir / 'lab.log').read_text()[-800:]}")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()

    def close_sessions(self) -> None:
        """Shut down the kernels that opening the notebooks started (their outputs are read, never run)."""
        api = f"http://127.0.0.1:{self.port}/api/sessions"
        headers = {"Authorization": f"token {self.token}"}
        with urllib.request.urlopen(urllib.request.Request(api, headers=headers), timeout=10) as r:
            sessions = json.load(r)
        for one in sessions:
            urllib.request.urlopen(urllib.request.Request(f"{api}/{one['id']}", headers=headers, method="DELETE"),
                                   timeout=30).close()

    def url(self, notebook: Path, n: int) -> str:
        """``notebook`` (copied into the root) in a fresh workspace, so no earlier tab is restored beside it."""
        shutil.copy(notebook, self.root / notebook.name)
        return (f"http://127.0.0.1:{self.port}/lab/workspaces/check{n}/tree/{notebook.name}"
                f"?reset&token={self.token}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_in_lab(chromium: str, url: str, window_width: int, profile: Path, png: Path | None = None) -> dict:
    """Open ``url`` (a notebook in JupyterLab) in headless Chromium over the DevTools protocol, wait until its
    outputs are rendered, run MEASURE_JS in the page and return its report (and a screenshot into ``png``)."""
    import asyncio  # noqa: PLC0415 - only the --lab mode talks to Chromium over a websocket
    import base64  # noqa: PLC0415 - as above

    from tornado.websocket import websocket_connect  # noqa: PLC0415 - tornado comes with jupyter_server

    proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                             f"--window-size={window_width},{WINDOW_HEIGHT}", "--remote-debugging-port=0",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")

        async def session() -> dict:
            ws = await websocket_connect(target["webSocketDebuggerUrl"], max_message_size=1 << 28)
            ids = iter(range(1, 1 << 30))

            async def call(method: str, **params):
                my = next(ids)
                ws.write_message(json.dumps({"id": my, "method": method, "params": params}))
                while True:
                    msg = json.loads(await ws.read_message())
                    if msg.get("id") == my:
                        return msg.get("result", {})

            async def value(expression: str):
                done = await call("Runtime.evaluate", expression=expression, returnByValue=True)
                return done["result"].get("value")

            await call("Page.navigate", url=url)
            seen, steady = -1, 0
            for _ in range(180):                         # until the number of rendered outputs stops changing
                await asyncio.sleep(1)
                n = await value("document.querySelectorAll('.jp-Notebook .jp-OutputArea-output').length") or 0
                steady = steady + 1 if n == seen and n > 0 else 0
                seen = n
                if steady >= 3:
                    break
            await value(MEASURE_JS)
            report = json.loads(await value(f"document.getElementById('{REPORT_ID}').textContent"))
            if png is not None:
                png.write_bytes(base64.b64decode((await call("Page.captureScreenshot", format="png"))["data"]))
            ws.close()
            return report

        return asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def check_notebook_in_lab(lab: JupyterLab, chromium: str, notebook: Path, workdir: Path, n: int,
                          output_width: int = OUTPUT_WIDTH, shots: Path | None = None,
                          window_width: int = 1400) -> tuple[dict, int]:
    """One entry of the results file, measured in JupyterLab itself; the window is narrowed or widened (from the
    reviewer's 1400 px) until the output area is ``output_width``. Returns the entry and that window width."""
    for attempt in range(3):
        profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
        report = measure_in_lab(chromium, lab.url(notebook, 3 * n + attempt), window_width, profile)
        lab.close_sessions()
        widths = report["areas"]
        area = max(set(widths), key=widths.count) if widths else output_width
        if abs(area - output_width) <= 1:
            break
        window_width += output_width - area
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
        profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
        measure_in_lab(chromium, lab.url(notebook, 3 * n + 2), window_width, profile, shots / f"{notebook.stem}.png")
        lab.close_sessions()
    return {**_entry(notebook, report, window_width), "renderer": "JupyterLab (served on localhost)"}, window_width


def failures(entry: dict, strict_text: bool = False) -> list[str]:
    """What fails the check in one notebook's entry (an empty list: it passes)."""
    out = []
    for kind in ("hidden_columns", "table_cut_words"):
        for t in entry[kind]:
            what = t.get("columns") or t.get("words")
            out.append(f"{entry['notebook']} cell {t['cell']} ({t['kind']} table): {kind.replace('_', ' ')} {what}")
    if strict_text and entry["text_lines_cut_mid_word"]:
        out.append(f"{entry['notebook']}: {entry['text_lines_cut_mid_word']} text line(s) cut mid-word")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="notebooks to check (default: notebooks/NN_*.ipynb)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file (default: %(default)s)")
    ap.add_argument("--width", type=int, default=OUTPUT_WIDTH, help="output area width in px (default: %(default)s)")
    ap.add_argument("--chromium", help="the Chromium binary (default: $CHROMIUM or chromium on PATH)")
    ap.add_argument("--screenshots", type=Path, help="write a PNG of each page (and of --shot cells) into this folder")
    ap.add_argument("--shot", action="append", default=[], metavar="NOTEBOOK:CELL",
                    help="also screenshot this cell on its own (repeatable; needs --screenshots; not with --lab)")
    ap.add_argument("--lab", action="store_true",
                    help="measure in JupyterLab itself, served on localhost, instead of nbconvert's lab HTML (slower)")
    ap.add_argument("--css", default="", help="extra CSS for the page (to try a fix of JupyterLab's own CSS)")
    ap.add_argument("--strict-text", action="store_true", help="fail on text output lines cut mid-word too")
    args = ap.parse_args(argv)

    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("browser_check: no Chromium found (set CHROMIUM=/path/to/chromium)", file=sys.stderr)
        return 2
    notebooks = args.notebooks or sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    version = chromium_version(chromium)
    entries, failed = [], []
    with tempfile.TemporaryDirectory(prefix="browser-check-") as tmp:
        work = Path(tmp)
        lab = JupyterLab(work).__enter__() if args.lab else None
        window = 1400
        try:
            for n, nb in enumerate(notebooks):
                if lab is not None:
                    entry, window = check_notebook_in_lab(lab, chromium, nb, work, n, args.width, args.screenshots,
                                                          window)
                else:
                    entry = check_notebook(chromium, nb, work, args.width, args.screenshots, args.css)
                entries.append(entry)
                failed += failures(entry, args.strict_text)
                w = entry["widest_table"]
                print(f"{entry['notebook']}: {entry['tables_measured']} tables, widest "
                      f"{w['width'] if w else 0} px in {entry['output_area_px']} px, hidden columns "
                      f"{sum(len(t['columns']) for t in entry['hidden_columns'])}, text lines wrapped "
                      f"{entry['text_lines_wrapped']} (cut mid-word {entry['text_lines_cut_mid_word']})")
        finally:
            if lab is not None:
                lab.__exit__()
        for spec in args.shot:
            name, _, cell = spec.rpartition(":")
            page = work / f"{Path(name).stem}.html"
            if args.screenshots and page.exists():
                screenshot(chromium, page, entries[0]["window_width_px"], work / "shot-profile",
                           args.screenshots / f"{Path(name).stem}_cell{cell}.png", int(cell), height=1400)
    results = {
        "what": "chapter pages in headless Chromium (nbconvert lab template, the notebooks' saved outputs): tables "
                "and text lines against the output area's width (scripts/browser_check.py)",
        "chromium": version,
        "output_area_px": args.width,
        "extra_css": args.css or None,
        "pages": entries,
        "failures": failed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for f in failed:
        print("FAIL", f, file=sys.stderr)
    print(f"results: {_display_name(args.out)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
