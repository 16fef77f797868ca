"""Checks for chapter 2 (binary indexing): parse an ``.idx`` by hand, the byte offset of
document k, book exercise 1 (three problems of tokenizing every step, and how
``.bin``/``.idx`` + mmap solves each), and q4, a transfer: the tokens of document k read from the
raw bytes of an ``.idx`` and a ``.bin`` whose documents hold several sequences or none.

q1 and q2 build fresh random datasets with :class:`labsupport.datasets.indexed.IndexedDatasetBuilder`
(random dtype, lengths, multi-sequence and empty documents) and compare the learner's function
with :class:`labsupport.datasets.indexed.IndexedDataset`.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path
from labsupport.check._core import Sealed, chapter_summary, check, check_seed, expect, short

CHAPTER = "ch02"

#: Book exercise 1: candidate problems of tokenizing every step (the learner picks three) ...
EXERCISE_1_PROBLEMS = {
    "cpu": "the same text is tokenized again at every step and every epoch: CPU-bound, the GPU starves",
    "random_access": "a text/jsonl file has no index: reaching document k means scanning everything "
                     "before it, so shuffling and exact resumption are slow or approximate",
    "memory": "holding terabytes of text (or of token lists) in RAM does not fit: out of memory",
    "precision": "bf16 matrix multiplications lose accuracy on tokenized text",
    "padding": "short documents padded to seq_length waste compute",
    "vocab": "the vocabulary grows with every new document",
}
#: ... and the mechanisms, one per problem.
EXERCISE_1_SOLUTIONS = {
    "tokenize_once": "tokenize once, offline; training reads token ids straight from the .bin",
    "idx_pointers": "the .idx stores every sequence's length and byte offset: document k is one "
                    "lookup away (O(1)), so any shuffle order or resume point is cheap and exact",
    "mmap": "mmap the .bin: the OS pages in only the bytes a sample touches; resident memory stays "
            "small whatever the file size",
    "packing": "pack several documents into one sequence",
    "fp32": "train in fp32",
    "bigger_batch": "use a larger batch so each step tokenizes more text at once",
}
#: q3's answer keys, sealed (see _core.Sealed): the three problems ...
_PROBLEMS = Sealed("labsupport:ch02:q3:problems", [
    "8ed8c7ea236425f977c5249ca1a7f5973e09538bf4e458ce301c9e6ee36792ba",
    "90f1efa02a1fa0287eeb497b24ceba4f278ada236cbfaf768bfbf50121d45775",
    "f0a5ed1fa5265ec7ced62da0025fc71caf308e54500125ba8f0d9cd71f470a6b",
])
#: ... and the [problem, solution] pairs.
_ANSWER = Sealed("labsupport:ch02:q3:pairs", [
    "7228bcea22e2d16ffa71a3ea59df09dfe06c4a8132e161c68cb937543fdb04c2",
    "e101945308ef1ba5f770b8dd2a7d7ecb2b9ce5cdbe7850711fd5b8ec585da5cc",
    "e93e9bef102e2682436cff3875749ea129088d7e05ce76071b0494238dcf6d6f",
])


summary = chapter_summary(CHAPTER)


def _random_dataset(rng: np.random.Generator, folder: Path, name: str) -> str:
    """A random .bin/.idx pair under ``folder``; returns its prefix."""
    dtype = [np.uint16, np.int32, np.uint8, np.int64][int(rng.integers(0, 4))]
    high = {np.uint16: 65535, np.int32: 2**31 - 1, np.uint8: 255, np.int64: 2**40}[dtype]
    prefix = str(folder / name)
    b = IndexedDatasetBuilder(get_bin_path(prefix), dtype)
    for _ in range(int(rng.integers(1, 40))):
        r = rng.random()
        if r < 0.1:
            b.add_document([], lengths=[] if rng.random() < 0.5 else [0])
            continue
        ids = rng.integers(0, high, int(rng.integers(1, 60)), dtype=np.int64)
        if r < 0.3 and ids.size >= 2:
            cut = int(rng.integers(1, ids.size))
            b.add_document(ids, lengths=[cut, ids.size - cut])
        else:
            b.add_document(ids)
    b.finalize(get_idx_path(prefix))
    return prefix


def _same_int(got, want: int) -> bool:
    """An integer header field: a Python or numpy integer (or a one-element integer array) equal to want."""
    if isinstance(got, bool):
        return False
    try:
        arr = np.asarray(got)
    except (TypeError, ValueError):
        return False
    return arr.dtype.kind in "iu" and arr.size == 1 and int(arr.reshape(())) == want


def _same_array(got, want) -> bool:
    try:
        return np.array_equal(np.asarray(got, dtype=np.int64), np.asarray(want, dtype=np.int64))
    except (TypeError, ValueError, OverflowError):
        return False


def _q1_mistake(key: str, got: Any, raw: bytes, n: int, d: int) -> str:
    """A known wrong array, named: read from an offset that takes the lengths as 8 bytes or the pointers as 4."""
    wrong = {"sequence_pointers": [(34 + 8 * n, n, "the pointers start after N int32 lengths: 34 + 4N, not 34 + 8N")],
             "document_indices": [(34 + 8 * n, d, "the document indices start at 34 + 4N + 8N = 34 + 12N "
                                   "(lengths 4 bytes each, pointers 8), not 34 + 8N")]}.get(key, [])
    for offset, count, text in wrong:
        if count and n and offset + 8 * count <= len(raw) and _same_array(got, np.frombuffer(raw, "<i8", count, offset)):
            return f" — {text}"
    return ""


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the offsets
    "reread chapter 2's 'The format made visible (.bin/.idx 형식)' and the layout line of the exercise: count "
    "the bytes each header field takes, then where each array begins; check.q1_header(parse_idx) tests the header "
    "alone",
    "a fixed 34-byte header (9-byte magic, then version, dtype code, N and D, little-endian), then three arrays "
    "back to back: N int32 lengths, N int64 pointers, D int64 document indices; each array starts where the "
    "previous one ends, so its offset adds up the bytes before it",
    "magic = raw[:9]; struct.unpack('<QBQQ', raw[9:34]) gives version, dtype "
    "code, N and D; then np.frombuffer(raw, '<i4', N, 34), ('<i8', N, 34 + 4N) and "
    "('<i8', D, 34 + 12N). Raise ValueError when the magic is not b'MMIDIDX\\x00\\x00'."))
def q1(parse_idx) -> str:
    rng = np.random.default_rng(check_seed())
    tmp = Path(tempfile.mkdtemp(prefix="ch02_q1_"))
    try:
        for case in range(12):
            prefix = _random_dataset(rng, tmp, f"d{case}")
            raw = Path(get_idx_path(prefix)).read_bytes()
            ds = IndexedDataset(prefix)
            got = parse_idx(raw)
            expect(isinstance(got, dict), f"parse_idx(...) returned {type(got).__name__}; expected a dict")
            want = {"version": 1, "dtype_code": ds.header.dtype_code, "num_sequences": len(ds),
                    "num_document_indices": len(ds.document_indices)}
            for key, value in want.items():
                expect(key in got, f"the dict has no key {key!r} (keys: {sorted(got, key=str)})")
                expect(_same_int(got[key], value), f"{key} = {short(got[key])}, expected {value} "
                       f"(a dataset with {len(ds)} sequences, dtype {ds.dtype.name})")
            for key, arr in (("sequence_lengths", ds.sequence_lengths),
                             ("sequence_pointers", ds.sequence_pointers),
                             ("document_indices", ds.document_indices)):
                expect(key in got, f"the dict has no key {key!r} (keys: {sorted(got, key=str)})")
                expect(_same_array(got[key], arr), f"{key} = {short(np.asarray(got[key]).tolist())}, "
                       f"expected {short(arr.tolist())}"
                       + _q1_mistake(key, got[key], raw, len(ds), len(ds.document_indices)))
            del ds
        bad = bytearray(raw)
        bad[:9] = b"TNTIDX\x00\x00\x00"
        try:
            parse_idx(bytes(bad))
        except ValueError:
            pass
        else:
            expect(False, "parse_idx accepted a file whose magic is b'TNTIDX\\x00\\x00\\x00'; "
                   "raise ValueError for a wrong magic")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return "12 random .idx files (4 dtypes, empty and multi-sequence documents) and a bad magic"


def q1_header(parse_idx) -> bool:
    """Step 1 of q1, not graded: only the four header fields (version, dtype code, N, D) of 3 random
    ``.idx`` files, so the header can be right before the three arrays are written. Prints one line."""
    from labsupport.check._core import CheckFailed

    rng = np.random.default_rng(check_seed())
    tmp = Path(tempfile.mkdtemp(prefix="ch02_q1h_"))
    try:
        for case in range(3):
            prefix = _random_dataset(rng, tmp, f"h{case}")
            with IndexedDataset(prefix) as ds:
                want = {"version": 1, "dtype_code": ds.header.dtype_code, "num_sequences": len(ds),
                        "num_document_indices": len(ds.document_indices)}
            got = parse_idx(Path(get_idx_path(prefix)).read_bytes())
            expect(isinstance(got, dict), f"parse_idx(...) returned {type(got).__name__}; expected a dict")
            wrong = [f"{k} = {short(got.get(k))}, expected {v}" for k, v in want.items() if not _same_int(got.get(k), v)]
            expect(not wrong, "; ".join(wrong))
        print("✅ step 1 of q1: the header fields are right — now the three arrays, then check.q1")
        return True
    except CheckFailed as exc:
        print(f"❌ step 1 of q1: {exc}\n   hint: struct.unpack('<QBQQ', raw[9:34]) after the 9-byte magic")
    except Exception as exc:  # noqa: BLE001 - the learner's code
        if isinstance(exc, NotImplementedError):
            print("🟡 step 1 of q1: not attempted — the stub still raises NotImplementedError")
        else:
            print(f"❌ step 1 of q1: parse_idx raised {type(exc).__name__}: {short(str(exc))}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return False


def _q2_mistake(got: int, lengths: np.ndarray, doc_idx: np.ndarray, itemsize: int, k: int) -> str:
    """A known wrong offset, named: tokens for bytes, sequence k for document k, one sequence too many."""
    first = int(doc_idx[k])
    tokens_before = int(lengths[:first].astype(np.int64).sum())
    if itemsize > 1 and got == tokens_before:
        return f" — that counts tokens; multiply by itemsize = {itemsize} for bytes"
    if k != first and got == int(lengths[:k].astype(np.int64).sum()) * itemsize:
        return (f" — that is where SEQUENCE {k} starts; document {k} starts at sequence "
                f"document_indices[{k}] = {first}")
    if first < len(lengths) and lengths[first] and got == int(lengths[:first + 1].astype(np.int64).sum()) * itemsize:
        return " — that also counts the first sequence of document k itself: stop before sequence d[k]"
    return ""


@check(CHAPTER, "q2", hint=(
    "reread chapter 2's 'O(1) random access to document k': a byte offset counts everything stored in the .bin "
    "before document k — which sequences are those, and what unit are the lengths in?",
    "document k starts at sequence document_indices[k] (not at sequence k: documents may hold several sequences "
    "or none); add up the lengths of all sequences before it, in tokens, and turn tokens into bytes",
    "document k starts at sequence d[k]; every sequence before it takes "
    "length × itemsize bytes, so the offset is sum(sequence_lengths[:d[k]]) * itemsize."))
def q2(document_byte_offset) -> str:
    rng = np.random.default_rng(check_seed())
    tmp = Path(tempfile.mkdtemp(prefix="ch02_q2_"))
    n = 0
    try:
        for case in range(10):
            prefix = _random_dataset(rng, tmp, f"d{case}")
            ds = IndexedDataset(prefix)
            lengths = np.array(ds.sequence_lengths)
            doc_idx = np.array(ds.document_indices)
            itemsize = ds.dtype.itemsize
            for k in rng.integers(0, ds.num_documents, 8):   # always 8: a stable message
                k = int(k)
                want = ds.document_byte_offset(k)
                got = document_byte_offset(lengths.copy(), doc_idx.copy(), itemsize, k)
                expect(isinstance(got, (int, np.integer)) and not isinstance(got, bool),
                       f"document_byte_offset(..., itemsize={itemsize}, k={k}) returned "
                       f"{short(got)} ({type(got).__name__}); expected an int")
                expect(got == want, f"document_byte_offset(lengths={short(lengths.tolist(), 60)}, "
                       f"document_indices={short(doc_idx.tolist(), 60)}, itemsize={itemsize}, k={k}) "
                       f"returned {got}, expected {want}" + _q2_mistake(int(got), lengths, doc_idx, itemsize, k))
                n += 1
            del ds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return f"{n} documents of 10 random datasets"


@check(CHAPTER, "q3", hint=(
    "reread chapter 2's 'The problem, measured' (§6.2.3) and the two sections after it: what does tokenizing at "
    "every step cost, what does a text file lack, and what happens when terabytes are loaded?",
    "three problems, each solved by one mechanism of .bin/.idx + mmap: work repeated at every step and epoch, "
    "reaching document k without scanning, and data far larger than RAM. Padding is a real cost too, but "
    "packing (chapter 4) solves it, not .bin/.idx.",
    "Book §6.2.3: the three problems are re-tokenizing (CPU), random access, "
    "and memory; padding is real but solved by packing (chapter 4), not by .bin/.idx."))
def q3(exercise_1) -> tuple[str, dict[str, str]]:
    answer = exercise_1()
    expect(isinstance(answer, dict), f"exercise_1() must return a dict, got {type(answer).__name__}")
    problems = answer.get("problems")
    expect(isinstance(problems, dict), "answer['problems'] must be a dict: problem key → solution key")
    unknown = [k for k in problems if k not in EXERCISE_1_PROBLEMS]
    expect(not unknown, f"unknown problem keys {unknown}; use keys of EXERCISE_1_PROBLEMS")
    expect(all(isinstance(v, str) for v in problems.values()),
           f"answer['problems'] = {short(problems)}: map each problem key to ONE solution key (a string)")
    unknown = [v for v in problems.values() if v not in EXERCISE_1_SOLUTIONS]
    expect(not unknown, f"unknown solution keys {unknown}; use keys of EXERCISE_1_SOLUTIONS")
    expect(len(problems) == 3, f"pick exactly three problems, got {len(problems)}")
    wrong = sorted(p for p in problems if p not in _PROBLEMS)
    expect(not wrong, f"{wrong} is not one of the three problems of tokenizing every step that "
           ".bin/.idx + mmap solves")
    for p, s in problems.items():
        expect([p, s] in _ANSWER, f"problem {p!r}: {s!r} does not solve it")
    text = answer.get("explanation", "")
    expect(isinstance(text, str) and len(text.split()) >= 20,
           "add an 'explanation' (at least 20 words): each problem and how its solution works")
    return ("problems and solutions matched. Compare your explanation with this model answer: " + MODEL_ANSWER_Q3,
            {"explanation": text})


#: Shown once q3 passes, to compare the free-text explanation with.
MODEL_ANSWER_Q3 = (
    "(1) Tokenizing at every step repeats the same CPU work every epoch; when the loader's cores cannot make "
    "tokens as fast as the GPUs consume them (small models, slow tokenizers, busy cores) the GPUs wait — "
    "tokenize once offline and read ids from the .bin. (2) jsonl has no index: the .idx gives every sequence's "
    "length and byte offset, so document k, any shuffled order and the resume point are one lookup. (3) Terabytes "
    "do not fit in RAM, and every loader process that loads them pays again; mmap pages in only what samples touch, "
    "once, in a page cache all processes share.")


def _q4_mistake(got: Any, ds: IndexedDataset, k: int) -> str:
    """A known wrong document, named: only its first sequence, or sequence k instead of document k."""
    d = ds.document_indices
    first, last = int(d[k]), int(d[k + 1])
    if last - first > 1 and _same_array(got, ds.get(first)):
        return f" — that is only the first of its {last - first} sequences: join them all"
    if k < len(ds) and k != first and _same_array(got, ds.get(k)):
        return f" — that is SEQUENCE {k}; document {k} starts at sequence document_indices[{k}] = {first}"
    return ""


@check(CHAPTER, "q4", hint=(
    "decode the hand-made file printed above the check on paper first: which sequences make up each document, "
    "where does each start in the .bin, and what is a document with no sequence?",
    "parse the .idx with your exercise-1 code; its dtype code names the token type; document k is the sequences "
    "document_indices[k] up to document_indices[k+1] (exclusive) — zero, one or several — each read from its "
    "pointer (in bytes) for its length (in tokens), then joined",
    "parse the .idx as in exercise 1; the dtype code names the token type (1 = uint8, 4 = int32, 5 = int64, "
    "8 = uint16, ...). Document k is sequences d[k] .. d[k+1]-1: np.frombuffer(raw_bin, dtype, length, pointer) "
    "for each, then np.concatenate; no sequences → an empty array."))
def q4(document_tokens) -> str:
    """Checked: every document of 8 random datasets (uint8/uint16/int32/int64 tokens; documents of 0, 1 or 2
    sequences), returned as a 1-D integer array equal to IndexedDataset.document(k)."""
    rng = np.random.default_rng(check_seed())
    folder = Path(tempfile.mkdtemp(prefix="check_ch02_q4_"))
    n = multi = empty = 0
    try:
        for i in range(8):
            prefix = _random_dataset(rng, folder, f"d{i}")
            raw_idx, raw_bin = Path(prefix + ".idx").read_bytes(), Path(prefix + ".bin").read_bytes()
            with IndexedDataset(prefix) as ds:
                d = ds.document_indices
                for k in range(ds.num_documents):
                    want = ds.document(k)
                    got = document_tokens(raw_idx, raw_bin, k)
                    kind = "empty " if d[k + 1] == d[k] else ("multi-sequence " if d[k + 1] - d[k] > 1 else "")
                    expect(isinstance(got, np.ndarray) and got.ndim == 1,
                           f"document_tokens(..., k={k}) returned {type(got).__name__}; expected a 1-D numpy array")
                    expect(_same_array(got, want), f"{kind}document {k} (sequences {int(d[k])}..{int(d[k + 1]) - 1} "
                           f"of a {ds.dtype.name} dataset): got {short(np.asarray(got).tolist())}, "
                           f"expected {short(want.tolist())}" + _q4_mistake(got, ds, k))
                    n += 1
                    multi += kind.startswith("multi")
                    empty += kind.startswith("empty")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    expect(multi and empty, "a checker bug: the random datasets held no multi-sequence or no empty document")
    return "every document of 8 random datasets, multi-sequence and empty ones included"
