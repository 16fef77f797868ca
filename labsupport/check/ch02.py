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
from labsupport.check._core import Sealed, chapter_summary, check, check_seed, expect, mistake, short

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


_Q1_FORMULA = ("magic = raw[:9]; version, dtype_code, N, D = struct.unpack('<QBQQ', raw[9:34]); lengths = "
               "np.frombuffer(raw, '<i4', N, 34); pointers = np.frombuffer(raw, '<i8', N, 34 + 4N); document "
               "indices = np.frombuffer(raw, '<i8', D, 34 + 12N); raise ValueError unless magic == b'MMIDIDX\\x00\\x00'")


def _golden(folder: Path) -> str:
    """The exercise's golden vector: uint16 documents [1..5], [6, 7], [8..14] (a 102-byte .idx)."""
    prefix = str(folder / "golden")
    b = IndexedDatasetBuilder(get_bin_path(prefix), np.uint16)
    for doc in ([1, 2, 3, 4, 5], [6, 7], list(range(8, 15))):
        b.add_document(doc)
    b.finalize(get_idx_path(prefix))
    return prefix


def _q1_array_kind(key: str, got: Any, raw: bytes, n: int, d: int) -> str | None:
    """A known wrong array, named: lengths read as int64, pointers or document indices from a wrong offset."""
    wrong = {"sequence_lengths": [("<i8", 34, n, "lengths_as_int64")],
             "sequence_pointers": [("<i8", 34 + 8 * n, n, "pointers_after_8n")],
             "document_indices": [("<i8", 34 + 8 * n, d, "documents_after_8n"),
                                  ("<i8", 34 + 16 * n, d, "documents_after_16n")]}.get(key, [])
    for dtype, offset, count, kind in wrong:
        if count and n and offset + 8 * count <= len(raw) and _same_array(got, np.frombuffer(raw, dtype, count, offset)):
            return kind
    return None


def _q1_fail_array(kind: str | None, what: str, key: str, got: Any, want: np.ndarray) -> None:
    symptom = f"{what}: {key} = {short(np.asarray(got).tolist())}, expected {short(want.tolist())}"
    if kind == "lengths_as_int64":
        mistake(kind, symptom=symptom, ask="How many bytes does one sequence length take in the layout line?",
                fix="the lengths are N int32 values: np.frombuffer(raw, '<i4', N, 34)", formula=_Q1_FORMULA)
    if kind == "pointers_after_8n":
        mistake(kind, symptom=symptom,
                ask="How many bytes do the N lengths before the pointers take, so at which byte do the pointers begin?",
                fix="the pointers start right after N int32 lengths (4 bytes each): offset 34 + 4N, not 34 + 8N",
                formula=_Q1_FORMULA)
    if kind in ("documents_after_8n", "documents_after_16n"):
        mistake("documents_offset", symptom=symptom,
                ask="Which arrays lie before the document indices, and how many bytes does each element of each take?",
                fix="the document indices start after N int32 lengths and N int64 pointers: 34 + 4N + 8N = 34 + 12N",
                formula=_Q1_FORMULA)
    expect(False, symptom)


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
    """Checked: the exercise's golden vector, then 12 random .idx files (4 dtypes, empty and multi-sequence
    documents), every field against IndexedDataset; and a wrong magic must raise ValueError."""
    rng = np.random.default_rng(check_seed())
    tmp = Path(tempfile.mkdtemp(prefix="ch02_q1_"))
    try:
        prefixes = [_golden(tmp)] + [_random_dataset(rng, tmp, f"d{case}") for case in range(12)]
        for case, prefix in enumerate(prefixes):
            raw = Path(get_idx_path(prefix)).read_bytes()
            ds = IndexedDataset(prefix)
            what = ("the golden vector (3 uint16 sequences, 102-byte .idx)" if case == 0 else
                    f"a random .idx ({len(ds)} {ds.dtype.name} sequences, {len(ds.document_indices)} document indices)")
            got = parse_idx(raw)
            expect(isinstance(got, dict), f"parse_idx(...) returned {type(got).__name__}; expected a dict")
            want = {"version": 1, "dtype_code": ds.header.dtype_code, "num_sequences": len(ds),
                    "num_document_indices": len(ds.document_indices)}
            for key, value in want.items():
                expect(key in got, f"the dict has no key {key!r} (keys: {sorted(got, key=str)})")
                expect(_same_int(got[key], value), f"{what}: {key} = {short(got[key])}, expected {value}")
            for key, arr in (("sequence_lengths", ds.sequence_lengths),
                             ("sequence_pointers", ds.sequence_pointers),
                             ("document_indices", ds.document_indices)):
                expect(key in got, f"the dict has no key {key!r} (keys: {sorted(got, key=str)})")
                if not _same_array(got[key], arr):
                    _q1_fail_array(_q1_array_kind(key, got[key], raw, len(ds), len(ds.document_indices)),
                                   what, key, got[key], np.asarray(arr))
            del ds
        raw = Path(get_idx_path(prefixes[0])).read_bytes()
        bad = b"TNTIDX\x00\x00\x00" + raw[9:]
        try:
            parse_idx(bad)
        except ValueError:
            pass
        else:
            mistake("accepts_bad_magic",
                    symptom="parse_idx accepted the golden vector with its magic changed to b'TNTIDX\\x00\\x00\\x00'",
                    ask="What does your function do with bytes that are not a Megatron MMIDIDX index at all?",
                    fix="compare raw[:9] with b'MMIDIDX\\x00\\x00' first and raise ValueError when they differ",
                    formula=_Q1_FORMULA)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return "the golden vector, 12 random .idx files (4 dtypes, empty and multi-sequence documents) and a bad magic"


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
        print(f"❌ step 1 of q1: {exc}\n   hint: how many bytes does each header field take (the layout line), and at "
              "which byte does the field after the 9-byte magic begin?")
    except Exception as exc:  # noqa: BLE001 - the learner's code
        if isinstance(exc, NotImplementedError):
            print("🟡 step 1 of q1: not attempted — the stub still raises NotImplementedError")
        else:
            print(f"❌ step 1 of q1: parse_idx raised {type(exc).__name__}: {short(str(exc))}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return False


_Q2_FORMULA = "offset of document k = sum(sequence_lengths[:document_indices[k]]) × itemsize"
#: small hand-made cases, checked before the random ones: (lengths, document_indices, itemsize, k)
_Q2_SMALL = [([5, 2], [0, 1, 2], 2, 1),           # one sequence per document
             ([3, 2, 4], [0, 2, 3], 2, 1),        # document 0 holds two sequences
             ([3, 4], [0, 1, 1, 2], 4, 2)]        # document 1 holds none


def _q2_kind(got: Any, lengths: np.ndarray, doc_idx: np.ndarray, itemsize: int, k: int) -> str | None:
    """What is wrong with ``got`` (None: nothing): tokens for bytes, sequence k, one sequence too many."""
    if not isinstance(got, (int, np.integer)) or isinstance(got, bool):
        return "not_an_int"
    first = int(doc_idx[k])
    tokens_before = int(lengths[:first].astype(np.int64).sum())
    if got == tokens_before * itemsize:
        return None
    if itemsize > 1 and got == tokens_before:
        return "tokens_not_bytes"
    if k != first and got == int(lengths[:k].astype(np.int64).sum()) * itemsize:
        return "sequence_k"
    if first < len(lengths) and lengths[first] and got == int(lengths[:first + 1].astype(np.int64).sum()) * itemsize:
        return "one_sequence_too_many"
    return "wrong_offset"


def _q2_fail(kind: str, lengths: np.ndarray, doc_idx: np.ndarray, itemsize: int, k: int, got: Any) -> None:
    call = (f"document_byte_offset({short(lengths.tolist(), 60)}, {short(doc_idx.tolist(), 60)}, itemsize={itemsize}, "
            f"k={k})")
    expect(kind != "not_an_int", f"{call} returned {short(got)} ({type(got).__name__}); expected an int")
    first = int(doc_idx[k])
    last = int(doc_idx[k + 1])
    holds = {0: "no sequence", 1: f"sequence {first}"}.get(last - first, f"sequences {first}..{last - 1}")
    symptom = f"{call} returned {short(got)}; document {k} holds {holds}"
    if kind == "tokens_not_bytes":
        mistake(kind, symptom=symptom + f", stored as {itemsize}-byte tokens",
                ask="In which unit are the sequence lengths, and in which unit is a byte offset?",
                fix=f"the lengths count tokens: multiply by itemsize = {itemsize} for bytes", formula=_Q2_FORMULA)
    if kind == "sequence_k":
        mistake(kind, symptom=symptom,
                ask=f"Is k a document number or a sequence number? Where does the index say document {k} starts?",
                fix=f"document k starts at sequence document_indices[k] (here {first}), not at sequence k: add the "
                    "lengths before that one", formula=_Q2_FORMULA)
    if kind == "one_sequence_too_many":
        mistake(kind, symptom=symptom,
                ask=f"Does the offset of document {k} count the bytes of its own first sequence?",
                fix="stop before sequence document_indices[k]: sum(lengths[:d[k]]), not [:d[k] + 1]",
                formula=_Q2_FORMULA)
    expect(False, symptom)


@check(CHAPTER, "q2", hint=(
    "reread chapter 2's 'O(1) random access to document k': a byte offset counts everything stored in the .bin "
    "before document k — which sequences are those, and what unit are the lengths in?",
    "document k starts at sequence document_indices[k] (not at sequence k: documents may hold several sequences "
    "or none); add up the lengths of all sequences before it, in tokens, and turn tokens into bytes",
    "document k starts at sequence d[k]; every sequence before it takes "
    "length × itemsize bytes, so the offset is sum(sequence_lengths[:d[k]]) * itemsize."))
def q2(document_byte_offset) -> str:
    """Checked: 3 small hand-made cases, then 8 random documents of each of 10 random datasets plus every
    document right after an empty one, against IndexedDataset.document_byte_offset."""
    for lengths, doc_idx, itemsize, k in _Q2_SMALL:
        lengths, doc_idx = np.array(lengths, dtype=np.int32), np.array(doc_idx, dtype=np.int64)
        got = document_byte_offset(lengths.copy(), doc_idx.copy(), itemsize, k)
        kind = _q2_kind(got, lengths, doc_idx, itemsize, k)
        if kind:
            _q2_fail(kind, lengths, doc_idx, itemsize, k, got)
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
            empty_before = [k for k in range(1, ds.num_documents)
                            if doc_idx[k] == doc_idx[k - 1] or lengths[doc_idx[k - 1]:doc_idx[k]].sum() == 0]
            for k in [int(k) for k in rng.integers(0, ds.num_documents, 8)] + empty_before:
                want = ds.document_byte_offset(k)
                got = document_byte_offset(lengths.copy(), doc_idx.copy(), itemsize, k)
                kind = _q2_kind(got, lengths, doc_idx, itemsize, k)
                if kind or got != want:
                    _q2_fail(kind or "wrong_offset", lengths, doc_idx, itemsize, k, got)
                n += 1
            del ds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    expect(n >= 80, "a checker bug: fewer than 80 documents checked")
    return "3 hand-made cases, 8 random documents of each of 10 random datasets and every document right after an empty one"



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
    expect(not unknown, f"unknown problem keys {short(unknown)}; use keys of EXERCISE_1_PROBLEMS")
    expect(all(isinstance(v, str) for v in problems.values()),
           f"answer['problems'] = {short(problems)}: map each problem key to ONE solution key (a string)")
    unknown = [v for v in problems.values() if v not in EXERCISE_1_SOLUTIONS]
    expect(not unknown, f"unknown solution keys {short(unknown)}; use keys of EXERCISE_1_SOLUTIONS")
    if "padding" in problems:
        mistake("padding_is_packing", symptom=f"your problems {short(sorted(problems))} include 'padding'",
                ask="Does storing token ids in a .bin/.idx pair change how many pad tokens a batch holds?",
                fix="padding is a real cost, but packing (chapter 4) solves it, not .bin/.idx; the three problems "
                    "are work repeated every step, reaching document k, and data larger than RAM",
                formula="Book §6.2.3: re-tokenizing (CPU) → tokenize once; random access → the .idx pointers; "
                        "memory → mmap")
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


_Q4_FORMULA = ("idx = parse_idx(raw_idx); d = idx['document_indices']; dtype from idx['dtype_code']; "
               "np.concatenate([np.frombuffer(raw_bin, dtype, idx['sequence_lengths'][s], idx['sequence_pointers'][s]) "
               "for s in range(d[k], d[k + 1])]), or an empty array when d[k] == d[k + 1]")
_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}


def _hand_made(folder: Path) -> list[str]:
    """The exercise's hand-made file (uint16: [1, 2, 3] + [4, 5], no sequence, [6]) and a small int32 one."""
    out = []
    for name, dtype, docs in (("x", np.uint16, [([1, 2, 3, 4, 5], [3, 2]), ([], []), ([6], [1])]),
                              ("y", np.int32, [([70000, 1, 2], [3])])):
        prefix = str(folder / name)
        b = IndexedDatasetBuilder(get_bin_path(prefix), dtype)
        for ids, lengths in docs:
            b.add_document(ids, lengths=lengths)
        b.finalize(get_idx_path(prefix))
        out.append(prefix)
    return out


def _read_as(ds: IndexedDataset, raw_bin: bytes, k: int, dtype: Any) -> np.ndarray | None:
    """Document k's sequences read with another token type (what a learner with a fixed dtype gets)."""
    parts = []
    d = ds.document_indices
    for s in range(int(d[k]), int(d[k + 1])):
        count, offset = int(ds.sequence_lengths[s]), int(ds.sequence_pointers[s])
        if offset + count * np.dtype(dtype).itemsize > len(raw_bin):
            return None
        parts.append(np.frombuffer(raw_bin, np.dtype(dtype).newbyteorder("<"), count, offset))
    return np.concatenate(parts) if parts else None


def _q4_kind(got: Any, ds: IndexedDataset, raw_bin: bytes, k: int) -> str | None:
    """A known wrong document, named: only its first sequence, sequence k, another token type."""
    if not (isinstance(got, np.ndarray) and got.ndim == 1):
        return "not_an_array"
    want = ds.document(k)
    if _same_array(got, want):
        return None
    d = ds.document_indices
    first, last = int(d[k]), int(d[k + 1])
    if last - first > 1 and _same_array(got, ds.get(first)):
        return "first_sequence_only"
    if k < len(ds) and k != first and _same_array(got, ds.get(k)):
        return "sequence_k"
    for dtype in _DTYPES.values():
        if np.dtype(dtype) != ds.dtype:
            other = _read_as(ds, raw_bin, k, dtype)
            if other is not None and _same_array(got, other):
                return "wrong_dtype"
    return "wrong_tokens"


def _q4_fail(kind: str, what: str, ds: IndexedDataset, k: int, got: Any) -> None:
    d = ds.document_indices
    first, last = int(d[k]), int(d[k + 1])
    call = f"document_tokens(<{what}>, k={k})"
    expect(kind != "not_an_array", f"{call} returned {type(got).__name__}; expected a 1-D numpy array")
    holds = {0: "no sequence", 1: f"sequence {first}"}.get(last - first, f"sequences {first}..{last - 1}")
    symptom = (f"{call} returned {short(np.asarray(got).tolist())}, expected {short(ds.document(k).tolist())}; "
               f"document {k} holds {holds}")
    if kind == "first_sequence_only":
        mistake(kind, symptom=symptom, ask=f"How many sequences does document {k} hold, and how many did you read?",
                fix="read every sequence document_indices[k] .. document_indices[k+1] - 1 and np.concatenate them",
                formula=_Q4_FORMULA)
    if kind == "sequence_k":
        mistake(kind, symptom=symptom + f" — your result is sequence {k}",
                ask=f"Is k a document number or a sequence number? Where does the .idx say document {k} starts?",
                fix="document k starts at sequence document_indices[k], not at sequence k", formula=_Q4_FORMULA)
    if kind == "wrong_dtype":
        mistake(kind, symptom=symptom + f"; the header's dtype code is {ds.header.dtype_code}",
                ask="Which token type does this file's header name, and which type did you read the .bin with?",
                fix="map dtype_code to its numpy type (1 uint8, 4 int32, 5 int64, 8 uint16, …) and read with it",
                formula=_Q4_FORMULA)
    expect(False, symptom)


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
    """Checked: the exercise's hand-made file and a small int32 one first, then every document of 8 random
    datasets (uint8/uint16/int32/int64 tokens; documents of 0, 1 or 2 sequences), each returned as a 1-D
    integer array equal to IndexedDataset.document(k)."""
    rng = np.random.default_rng(check_seed())
    folder = Path(tempfile.mkdtemp(prefix="check_ch02_q4_"))
    n = multi = empty = 0
    try:
        prefixes = _hand_made(folder) + [_random_dataset(rng, folder, f"d{i}") for i in range(8)]
        for i, prefix in enumerate(prefixes):
            raw_idx, raw_bin = Path(prefix + ".idx").read_bytes(), Path(prefix + ".bin").read_bytes()
            with IndexedDataset(prefix) as ds:
                what = ["the hand-made x.idx, x.bin", "a small int32 file"][i] if i < 2 else \
                    f"a random {ds.dtype.name} dataset"
                d = ds.document_indices
                for k in range(ds.num_documents):
                    try:
                        got = document_tokens(raw_idx, raw_bin, k)
                    except Exception as exc:  # noqa: BLE001 - the learner's code: named only for an empty document
                        if d[k + 1] != d[k] or isinstance(exc, NotImplementedError):
                            raise
                        mistake("empty_document",
                                symptom=f"document_tokens(<{what}>, k={k}) raised {type(exc).__name__}: "
                                        f"{short(str(exc), 80)}; document {k} holds no sequence "
                                        f"(document_indices[{k}] == document_indices[{k + 1}] == {int(d[k])})",
                                ask="What are the tokens of a document with no sequence, and what does your code do "
                                    "when there is nothing to join?",
                                fix="return an empty array (np.zeros(0, dtype)) when d[k] == d[k+1]: np.concatenate "
                                    "needs at least one piece", formula=_Q4_FORMULA)
                    kind = _q4_kind(got, ds, raw_bin, k)
                    if kind:
                        _q4_fail(kind, what, ds, k, got)
                    n += 1
                    multi += int(i >= 2 and d[k + 1] - d[k] > 1)     # the random datasets' own
                    empty += int(i >= 2 and d[k + 1] == d[k])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    expect(multi and empty, "a checker bug: the random datasets held no multi-sequence or no empty document")
    return "every document of the hand-made file, a small int32 one and 8 random datasets, multi-sequence and empty ones included"
