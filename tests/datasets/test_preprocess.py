"""Tests of labsupport.datasets.preprocess (chapter 2): the CLI's outputs, order, bad lines, workbook_prefixes."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil

import numpy as np
import pytest

from labsupport.datasets import preprocess as pp
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.tokenizer import Tokenizer, train_sentencepiece
from labsupport.datasets.word_cache import word_cache_problem


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory):
    from labsupport.paths import data_file

    d = tmp_path_factory.mktemp("tok")
    return str(train_sentencepiece([data_file("code")], d / "t", 400, "bpe"))


@pytest.fixture(scope="module")
def tok(tok_path):
    return Tokenizer(tok_path)


TEXTS = ["def f(x):\n    return x + 1\n", "hello world", "", "안녕하세요 세계", "\ttabs\tand  spaces ",
         "import os\nprint(os.getcwd())"]


def write_jsonl(path, rows, trailing_newline=True):
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def run(argv, capsys):
    code = pp.main([str(a) for a in argv] + ["--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def docs_of(prefix):
    ds = IndexedDataset(prefix)
    return [ds.document(k).tolist() for k in range(ds.num_documents)]


def test_cli_writes_exact_ids_with_eod(tmp_path, tok, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": t, "id": i} for i, t in enumerate(TEXTS)])
    code, out, err = run(["--input", src, "--json-keys", "text", "--tokenizer-library",
                          "sentencepiece", "--tokenizer-model", tok_path, "--output-prefix",
                          tmp_path / "out" / "web", "--append-eod", "--workers", "1"], capsys)
    assert code == 0, err
    prefix = str(tmp_path / "out" / "web_text_document")
    for ext in (".bin", ".idx", ".json"):
        assert os.path.isfile(prefix + ext)
    expected = [tok.encode(t) + [tok.eod] if tok.encode(t) else [] for t in TEXTS]
    assert docs_of(prefix) == expected
    ds = IndexedDataset(prefix)
    # Megatron's script: empty text → a document with no sequence (and no EOD)
    assert ds.num_documents == len(TEXTS) and len(ds) == len(TEXTS) - 1
    assert ds.document_indices.tolist() == [0, 1, 2, 2, 3, 4, 5]
    assert ds.dtype == np.uint16
    assert "6 documents (1 empty), dtype uint16" in out
    assert f"text: {sum(map(len, expected)):,} tokens" in out
    # results on stdout, in order; the throughput line (timings) last, nothing but progress on stderr
    assert out.splitlines()[-1].startswith(out.splitlines()[-1].split(" s, ")[0]) and "MB/s" in out.splitlines()[-1]
    assert "MB/s" not in err


def test_without_append_eod_no_bos_no_eos(tmp_path, tok, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in TEXTS])
    code, _, err = run(["--input", src, "--tokenizer-model", tok_path, "--output-prefix",
                        tmp_path / "x"], capsys)
    assert code == 0, err
    assert docs_of(str(tmp_path / "x_text_document")) == [tok.encode(t) for t in TEXTS]


def test_sidecar_records_tokenizer_and_sources(tmp_path, tok, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in TEXTS])
    assert run(["--input", src, "--tokenizer-model", tok_path, "--output-prefix",
                tmp_path / "x", "--append-eod"], capsys)[0] == 0
    meta = IndexedDataset(str(tmp_path / "x_text_document")).metadata
    assert meta["tokenizer"]["fingerprint"] == tok.fingerprint
    assert meta["tokenizer"]["vocab_size"] == meta["vocab_size"] == 400
    assert meta["dtype"] == "uint16" and meta["eod"] == tok.eod and meta["append_eod"] is True
    assert meta["num_documents"] == 6 and meta["num_sequences"] == 5 and meta["empty_documents"] == 1
    import hashlib
    assert meta["sources"] == [{"path": str(src), "bytes": src.stat().st_size, "lines": 6,
                                "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}]


def test_order_preserved_across_files_globs_workers_and_blocks(tmp_path, tok, tok_path):
    rng = np.random.default_rng(0)
    from labsupport.paths import data_file

    pool = [json.loads(l)["text"] for l in data_file("code").read_text(encoding="utf-8").splitlines()]
    texts = [pool[i] for i in rng.integers(0, len(pool), 240)] + [""] * 3
    rng.shuffle(texts)
    for part in range(3):
        write_jsonl(tmp_path / f"part{part}.jsonl", [{"text": t} for t in texts[part::3]])
    files = [tmp_path / "part0.jsonl", tmp_path / "part1.jsonl", tmp_path / "part2.jsonl"]
    order = [t for f in files for t in (json.loads(l)["text"] for l in f.read_text().splitlines())]
    expected = [tok.encode(t) + [tok.eod] if tok.encode(t) else [] for t in order]
    outs = []
    for workers, chunk in ((1, pp.CHUNK_BYTES), (2, 4096), (3, 700)):
        res = pp.preprocess([str(tmp_path / "part*.jsonl")], tmp_path / f"w{workers}", tok_path,
                            append_eod=True, workers=workers, show_progress=False, chunk_bytes=chunk)
        prefix = res.prefixes["text"]
        assert docs_of(prefix) == expected
        outs.append(prefix)
    for prefix in outs[1:]:
        for ext in (".bin", ".idx"):
            assert open(prefix + ext, "rb").read() == open(outs[0] + ext, "rb").read()


def test_last_line_without_newline_and_long_lines(tmp_path, tok, tok_path):
    long = "x = 1\n" * 3000
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "first"}, {"text": long}, {"text": "last"}],
                      trailing_newline=False)
    res = pp.preprocess([src], tmp_path / "o", tok_path, workers=2, show_progress=False,
                        chunk_bytes=1024)
    assert docs_of(res.prefixes["text"]) == [tok.encode("first"), tok.encode(long), tok.encode("last")]
    assert res.sidecars["text"]["sources"][0]["lines"] == 3


# ----------------------------------------------------------------------------- the word cache
def _outputs(prefix):
    return {ext: open(prefix + ext, "rb").read() for ext in (".bin", ".idx", ".json")}


def test_word_cache_output_is_byte_identical_on_the_shipped_corpora(tmp_path):
    from labsupport.datasets.tokenizer import workbook_tokenizer
    from labsupport.paths import DOMAINS, data_file

    model = workbook_tokenizer()
    tok = Tokenizer(model)
    extra = TEXTS + ["  ", "a  b ", "▁ literal meta ▁▁", " ▁", "\t\n \n", "😀 👨‍👩‍👧  🇰🇷 "]
    write_jsonl(tmp_path / "extra.jsonl", [{"text": t, "title": t[::-1]} for t in extra])
    inputs = [data_file(d) for d in DOMAINS] + [tmp_path / "extra.jsonl"]
    runs = {}
    for cache in (False, True):
        for workers, chunk in ((1, pp.CHUNK_BYTES), (2, 64 * 1024)):
            name = f"{'cache' if cache else 'plain'}{workers}"
            res = pp.preprocess(inputs, tmp_path / name, tok, json_keys=("text",), append_eod=True,
                                workers=workers, strict=True, show_progress=False, chunk_bytes=chunk,
                                word_cache=cache)
            assert res.word_cache["used"] is cache
            if cache:
                assert 0 < res.word_cache["misses"] < res.word_cache["words"] // 2
            else:
                assert res.word_cache["reason"] and res.word_cache["words"] == 0
            runs[name] = _outputs(res.prefixes["text"])
    reference = runs.pop("plain1")
    for name, out in runs.items():
        assert out == reference, name  # .bin, .idx and the sidecar .json
    # and the ids are encode()'s: spot-check the extra documents (the last ones)
    ds = IndexedDataset(str(tmp_path / "cache2_text_document"))
    n = ds.num_documents
    got = [ds.document(k).tolist() for k in range(n - len(extra), n)]
    assert got == [tok.encode(t) + [tok.eod] if tok.encode(t) else [] for t in extra]


def test_word_cache_with_several_json_keys(tmp_path, tok, tok_path):
    rows = [{"text": t, "title": t.upper()[::-1] + "  x"} for t in TEXTS * 5]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    outs = []
    for cache in (True, False):
        res = pp.preprocess([src], tmp_path / f"c{cache}", tok, json_keys=("text", "title"),
                            append_eod=True, workers=2, show_progress=False, chunk_bytes=200,
                            word_cache=cache)
        outs.append([_outputs(res.prefixes[k]) for k in ("text", "title")])
        assert docs_of(res.prefixes["title"]) == [tok.encode(r["title"]) + [tok.eod] for r in rows]
    assert outs[0] == outs[1]


def test_no_word_cache_flag_and_stderr_note(tmp_path, tok, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in TEXTS * 3])
    base = ["--input", src, "--tokenizer-model", tok_path, "--append-eod"]
    code, out_cached, err = run(base + ["--output-prefix", tmp_path / "c"], capsys)
    assert code == 0 and "word cache:" in out_cached and "words seen before" in out_cached
    code, out_plain, err = run(base + ["--output-prefix", tmp_path / "p", "--no-word-cache"], capsys)
    assert code == 0 and "no word cache: turned off" in out_plain
    without_timing = lambda text: text.splitlines()[:-1]                # noqa: E731 - the last line has timings
    assert without_timing(out_cached.replace("/c_", "/p_")) == without_timing(out_plain)
    assert _outputs(str(tmp_path / "c_text_document")) == _outputs(str(tmp_path / "p_text_document"))


def test_tokenizer_without_exact_word_cache_is_encoded_as_before(tmp_path, capsys):
    from labsupport.paths import data_file

    model = train_sentencepiece([data_file("code")], tmp_path / "u", 400, "unigram")
    tok = Tokenizer(model)
    assert word_cache_problem(tok) is not None
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in TEXTS])
    res = pp.preprocess([src], tmp_path / "o", model, append_eod=True, workers=2, show_progress=False)
    assert res.word_cache["used"] is False and "not a BPE model" in res.word_cache["reason"]
    expected = [tok.encode(t) + [tok.eod] if tok.encode(t) else [] for t in TEXTS]
    assert docs_of(res.prefixes["text"]) == expected
    code, out, _ = run(["--input", src, "--tokenizer-model", model, "--output-prefix", tmp_path / "x"],
                       capsys)
    assert code == 0 and "no word cache: not a BPE model" in out


BAD_ROWS = [
    {"text": "good one"},
    '{"text": "unterminated',
    "",
    "[1, 2, 3]",
    {"body": "no text key"},
    {"text": 42},
    {"text": None},
    {"text": "good two"},
]


def test_bad_lines_reported_skipped_and_counted(tmp_path, tok, tok_path, capsys):
    src = write_jsonl(tmp_path / "bad.jsonl", BAD_ROWS)
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "third"}, "not json at all"])
    code, out, err = run(["--input", src, good, "--tokenizer-model", tok_path,
                          "--output-prefix", tmp_path / "o", "--append-eod"], capsys)
    assert code == 0
    assert f"{src}:2: invalid JSON (Unterminated string" in err
    assert f"{src}:3: blank line" in err
    assert f"{src}:4: not a JSON object (a list)" in err
    assert f"{src}:5: missing key 'text' (keys: ['body'])" in err
    assert f"{src}:6: key 'text' is an int, expected a string" in err
    assert f"{src}:7: key 'text' is a NoneType, expected a string" in err
    assert f"{good}:2: invalid JSON" in err                 # line numbers restart per file
    assert "skipped 7 bad lines" in out
    docs = docs_of(str(tmp_path / "o_text_document"))
    assert docs == [tok.encode(t) + [tok.eod] for t in ("good one", "good two", "third")]
    meta = json.load(open(tmp_path / "o_text_document.json"))
    assert meta["bad_lines_skipped"] == 7


def test_invalid_utf8_is_a_bad_line(tmp_path, tok, tok_path):
    src = tmp_path / "u.jsonl"
    src.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    res = pp.preprocess([src], tmp_path / "o", tok_path, show_progress=False, log=open(os.devnull, "w"))
    assert res.num_bad_lines == 1 and str(res.bad_lines[0]).startswith(f"{src}:2: not valid UTF-8")
    assert res.documents == 1


def test_strict_stops_at_first_bad_line_and_leaves_nothing(tmp_path, tok_path, capsys):
    src = write_jsonl(tmp_path / "bad.jsonl", BAD_ROWS)
    out_dir = tmp_path / "out"
    code, out, err = run(["--input", src, "--tokenizer-model", tok_path, "--output-prefix",
                          out_dir / "o", "--strict", "--workers", "2"], capsys)
    assert code == 1
    assert f"preprocess: error: {src}:2: invalid JSON" in err and "--strict" in err
    assert not out_dir.exists() or os.listdir(out_dir) == []


def test_many_bad_lines_are_capped_in_the_report(tmp_path, tok_path):
    src = write_jsonl(tmp_path / "b.jsonl", ["nope"] * 50 + [{"text": "fine"}])
    log = tmp_path / "log.txt"
    with open(log, "w") as fh:
        res = pp.preprocess([src], tmp_path / "o", tok_path, show_progress=False, log=fh)
    assert res.num_bad_lines == 50 and len(res.bad_lines) == pp.MAX_REPORTED
    text = log.read_text()
    assert text.count("— skipped") == pp.MAX_REPORTED and "only counted" in text


def test_multiple_json_keys(tmp_path, tok, tok_path, capsys):
    rows = [{"input": "q1", "output": "a1"}, {"input": "q2"}, {"input": "q3", "output": "a3"}]
    src = write_jsonl(tmp_path / "sft.jsonl", rows)
    code, out, err = run(["--input", src, "--json-keys", "input", "output", "--tokenizer-model",
                          tok_path, "--output-prefix", tmp_path / "sft", "--append-eod"], capsys)
    assert code == 0
    assert f"{src}:2: missing key 'output'" in err         # skipped for both keys: outputs stay aligned
    assert docs_of(str(tmp_path / "sft_input_document")) == [tok.encode(q) + [tok.eod] for q in ("q1", "q3")]
    assert docs_of(str(tmp_path / "sft_output_document")) == [tok.encode(a) + [tok.eod] for a in ("a1", "a3")]


@pytest.mark.parametrize("argv_tail, message", [
    (["--input", "MISSING.jsonl"], "--input 'MISSING.jsonl': no such file"),
    (["--input", "nothing*here.jsonl"], "--input 'nothing*here.jsonl' matches no file"),
])
def test_missing_inputs(tmp_path, tok_path, capsys, monkeypatch, argv_tail, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv_tail + ["--tokenizer-model", tok_path, "--output-prefix", "o"], capsys)
    assert code == 1 and message in err


def test_directory_input_and_bad_tokenizer(tmp_path, tok_path, capsys):
    code, _, err = run(["--input", tmp_path, "--tokenizer-model", tok_path, "--output-prefix",
                        tmp_path / "o"], capsys)
    assert code == 1 and "is a directory" in err
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    code, _, err = run(["--input", src, "--tokenizer-model", tmp_path / "no.model",
                        "--output-prefix", tmp_path / "o"], capsys)
    assert code == 1 and "--tokenizer-model" in err and "no.model" in err
    (tmp_path / "junk.model").write_bytes(b"not a model")
    code, _, err = run(["--input", src, "--tokenizer-model", tmp_path / "junk.model",
                        "--output-prefix", tmp_path / "o"], capsys)
    assert code == 1 and "junk.model is not a SentencePiece model" in err


def test_usage_errors(tmp_path, tok_path, capsys):
    assert run(["--tokenizer-model", tok_path, "--output-prefix", "o"], capsys)[0] == 2  # no --input
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    code, _, err = run(["--input", src, "--tokenizer-model", tok_path, "--output-prefix",
                        tmp_path / "o", "--workers", "0"], capsys)
    assert code == 2 and "--workers 0: must be ≥ 1" in err   # a usage error (issue 23)
    code, _, err = run(["--input", src, "--tokenizer-library", "tiktoken", "--tokenizer-model",
                        tok_path, "--output-prefix", tmp_path / "o"], capsys)
    assert code == 2 and "invalid choice" in err
    code, _, err = run(["--input", src, "--tokenizer-library", "huggingface", "--tokenizer-model",
                        tok_path, "--output-prefix", tmp_path / "o"], capsys)   # a SentencePiece model
    assert code == 1 and "error: " in err and err.count("\n") == 1 and "t.model is not UTF-8" in err, err
    assert not list(tmp_path.glob("o.*"))


def test_progress_bar_reports_documents_tokens_and_rate(tmp_path, tok_path, capsys, monkeypatch):
    monkeypatch.setenv("LABSUPPORT_HEADLESS", "1")
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in TEXTS * 20])
    pp.preprocess([src], tmp_path / "o", tok_path, show_progress=True, chunk_bytes=256)
    out, err = capsys.readouterr()
    assert out == ""
    assert "preprocess" in err and "docs" in err and "tokens" in err and "B/s" in err


# ----------------------------------------------------------------------------- workbook_prefixes
@pytest.fixture
def isolated_work(tmp_path, monkeypatch):
    """A fresh work dir holding only the (already built) workbook tokenizer."""
    from labsupport.datasets.tokenizer import workbook_tokenizer

    model = workbook_tokenizer()
    work = tmp_path / "work"
    (work / "tokenizer").mkdir(parents=True)
    shutil.copy(model, work / "tokenizer" / model.name)
    monkeypatch.setenv("LABSUPPORT_WORK", str(work))
    return work


def test_workbook_prefixes_builds_caches_and_prints_nothing(isolated_work, capsys):
    from labsupport.datasets.tokenizer import workbook_tokenizer
    from labsupport.paths import DOMAINS, data_file

    prefixes = pp.workbook_prefixes()
    assert capsys.readouterr().out == ""
    assert list(prefixes) == list(DOMAINS)
    tok = Tokenizer(workbook_tokenizer())
    for d, prefix in prefixes.items():
        assert prefix == str(isolated_work / "indexed" / f"{d}_text_document")
        ds = IndexedDataset(prefix)
        assert ds.metadata["tokenizer"]["fingerprint"] == tok.fingerprint
        first = json.loads(data_file(d).read_text(encoding="utf-8").splitlines()[0])["text"]
        assert ds.document(0).tolist() == tok.encode(first) + [tok.eod]
        n_lines = len(data_file(d).read_text(encoding="utf-8").splitlines())
        assert ds.num_documents == n_lines
    mtimes = {d: os.stat(p + ".idx").st_mtime_ns for d, p in prefixes.items()}
    assert pp.workbook_prefixes() == prefixes
    assert {d: os.stat(p + ".idx").st_mtime_ns for d, p in prefixes.items()} == mtimes  # cached


def test_workbook_prefixes_rebuilds_stale(isolated_work):
    prefixes = pp.workbook_prefixes(["korean"])
    side = prefixes["korean"] + ".json"
    meta = json.load(open(side))
    meta["tokenizer"]["fingerprint"] = "0" * 64          # built with "another tokenizer"
    json.dump(meta, open(side, "w"))
    pp.workbook_prefixes(["korean"])
    assert json.load(open(side))["tokenizer"]["fingerprint"] != "0" * 64
    os.unlink(prefixes["korean"] + ".idx")                # half a dataset
    pp.workbook_prefixes(["korean"])
    assert IndexedDataset(prefixes["korean"]).num_documents > 0


def _race(work: str, q) -> None:
    os.environ["LABSUPPORT_WORK"] = work
    from labsupport.datasets.preprocess import workbook_prefixes

    q.put(workbook_prefixes())


def test_workbook_prefixes_two_processes_race(isolated_work):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(isolated_work), q)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert results[0] == results[1]
    for prefix in results[0].values():
        assert IndexedDataset(prefix).num_documents > 0
    leftovers = [n for n in os.listdir(isolated_work / "indexed") if ".tmp-" in n]
    assert leftovers == []


def test_config_blend_resolves_to_the_workbook_prefixes():
    """configs/gpt_pretrain.yaml names <domain>_text_document prefixes; the workbook builds and finds them."""
    from labsupport.config import load_config
    from labsupport.datasets.indexed import IndexedDataset
    from labsupport.datasets.preprocess import resolve_workbook_blend, workbook_prefixes

    blend = list(load_config("gpt_pretrain").data.data_prefix)
    assert blend[0::2] == [0.6, 0.25, 0.15]
    assert [p.rsplit("/", 1)[-1] for p in blend[1::2]] == [f"{d}_text_document" for d in ("web", "code", "books")]
    resolved = resolve_workbook_blend(blend)
    built = workbook_prefixes(["web", "code", "books"])
    assert resolved == [0.6, built["web"], 0.25, built["code"], 0.15, built["books"]]
    assert all(IndexedDataset.exists(p) for p in resolved[1::2])
    other = [1.0, "/somewhere/else_text_document", 2.0, "/data/web"]
    assert resolve_workbook_blend(other) == other          # only <shipped domain>_text_document is rewritten


# ----------------------------------------------------------------------------- bad input (issue #13 item 14)

def test_json_key_that_no_line_has_fails_naming_the_keys_found(tmp_path, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"body": "x", "id": i} for i in range(5)])
    code, out, err = run(["--input", src, "--tokenizer-model", tok_path, "--json-keys", "text",
                          "--output-prefix", tmp_path / "o"], capsys)
    last = err.strip().splitlines()[-1]
    assert code == 1 and out == ""
    assert last.startswith("preprocess: error: no usable line: all 5 lines were skipped")
    assert "--json-keys text" in last and "['body', 'id']" in last, last
    assert not list(tmp_path.glob("o_*")), "an empty dataset was written"


def test_unwritable_output_folder_is_one_line(tmp_path, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "hello"}])
    code, out, err = run(["--input", src, "--tokenizer-model", tok_path,       # a missing folder is created
                          "--output-prefix", tmp_path / "no" / "such" / "dir" / "web"], capsys)
    assert code == 0 and (tmp_path / "no" / "such" / "dir" / "web_text_document.idx").is_file()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):           # root ignores permissions
            pytest.skip("running as root: every folder is writable")
        code, out, err = run(["--input", src, "--tokenizer-model", tok_path, "--output-prefix", locked / "web"], capsys)
        assert code == 1 and len(err.strip().splitlines()) == 1 and "cannot be written" in err, err
    finally:
        locked.chmod(0o700)


def test_a_file_as_output_folder_is_one_line(tmp_path, tok_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "hello"}])
    (tmp_path / "afile").write_text("x")
    code, out, err = run(["--input", src, "--tokenizer-model", tok_path,
                          "--output-prefix", tmp_path / "afile" / "web"], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--output-prefix" in err and "afile" in err and "Traceback" not in err, err


def test_stale_temporaries_of_a_killed_run_are_removed(tmp_path, tok_path, capsys):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                   # a pid that no longer runs
    prefix = tmp_path / "web_text_document"
    stale = [tmp_path / f"web_text_document{ext}.tmp-{dead.pid}-0123abcd" for ext in (".bin", ".idx", ".json")]
    live = tmp_path / f"web_text_document.bin.tmp-{os.getppid()}-89abcdef"      # a running process: kept
    other = tmp_path / f"webx_text_document.bin.tmp-{dead.pid}-0123abcd"       # another prefix: kept
    for p in stale + [live, other]:
        p.write_bytes(b"partial")
    assert pp.remove_stale_temporaries(prefix) == sorted(stale)
    assert live.exists() and other.exists() and not any(p.exists() for p in stale)
    for p in stale:
        p.write_bytes(b"partial")
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "hello"}])
    code, _, err = run(["--input", src, "--tokenizer-model", tok_path, "--output-prefix", tmp_path / "web"], capsys)
    # the run holds the prefix's lock: no other run writes it, so the live pid's file is a killed
    # run's too (its pid reused) and goes as well (issue #32 item 12)
    assert code == 0 and "removed 4 temporary file(s) left by an interrupted run" in err
    assert sorted(p.name for p in tmp_path.glob("web_text_document*")) == [
        "web_text_document.bin", "web_text_document.idx", "web_text_document.json"]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs POSIX process groups (Ctrl-C in a terminal)")
def test_ctrl_c_prints_one_line_leaves_nothing_and_exits_130(tmp_path, tok_path):
    import signal
    import subprocess
    import sys
    import time

    line = json.dumps({"text": "def f(x):\n    return x + 1  # some code to tokenize\n" * 20})
    src = tmp_path / "big.jsonl"
    src.write_text((line + "\n") * 40_000, encoding="utf-8")          # ~45 MB: seconds of work
    out_prefix = tmp_path / "out" / "big"
    out_prefix.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "labsupport", "preprocess", "--input", str(src), "--tokenizer-model",
                             tok_path, "--output-prefix", str(out_prefix), "--workers", "2", "--append-eod",
                             "--no-word-cache"],   # repeated text would hit the word cache and finish too soon
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while (not list(out_prefix.parent.glob(".big.staging-*/*.tmp-*"))
           or out_prefix.parent.joinpath("big_text_document.bin" + "").exists()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(1.0)                                             # the workers are tokenizing by now
    assert proc.poll() is None, "finished before Ctrl-C: make the input bigger"
    os.killpg(proc.pid, signal.SIGINT)                          # what Ctrl-C in a terminal does
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == "preprocess: interrupted (Ctrl-C); no output was written", err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert list(out_prefix.parent.iterdir()) == []
