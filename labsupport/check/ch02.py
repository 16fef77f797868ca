"""Checks for chapter 2 (binary indexing): q1 parse an ``.idx`` by hand · q2 the byte offset of
document k · q3 book exercise 1 (three problems of tokenizing every step, and how
``.bin``/``.idx`` + mmap solves each) · q4, a transfer: the tokens of document k read from the
raw bytes of an ``.idx`` and a ``.bin`` whose documents hold several sequences or none · q5 the
embedding rows Megatron builds for a tokenizer (its padded vocabulary).

q1 and q2 build fresh random datasets with :class:`labsupport.datasets.indexed.IndexedDatasetBuilder`
(random dtype, lengths, multi-sequence and empty documents) and compare the learner's function
with :class:`labsupport.datasets.indexed.IndexedDataset`; q5 compares with
:func:`labsupport.models.vocab_padding.padded_vocab_size` on edge and random cases. ``RULES`` holds
the mistakes the checks name.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path
from labsupport.models import vocab_padding as V
from labsupport.check._core import blame, CheckFailed, Sealed, chapter_summary, check, check_seed, expect, short
from labsupport.env import for_the_page
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import diagnose, explain, in_words, Rule, Rules

CHAPTER = "ch02"
TEXTS = load_texts(CHAPTER)

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
_PROBLEMS = Sealed.load("labsupport:ch02:q3:problems")
#: ... and the [problem, solution] pairs.
_ANSWER = Sealed.load("labsupport:ch02:q3:pairs")

#: the mistakes the checks name, by question (each table sits next to its check)
RULES: dict[str, Rules] = {}


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


# ---------------------------------------------------------------------------------------------
# q1: parse an .idx
_Q1_FORMULA = ("magic = raw[:9]; version, dtype_code, N, D = struct.unpack('<QBQQ', raw[9:34]); lengths = "
               "np.frombuffer(raw, '<i4', N, 34); pointers = np.frombuffer(raw, '<i8', N, 34 + 4N); document "
               "indices = np.frombuffer(raw, '<i8', D, 34 + 12N); "
               "raise ValueError unless magic == b'MMIDIDX\\x00\\x00'")
_ARRAY = "{what}: {key} = {got}, expected {want}"
RULES["q1"] = Rules(
    Rule("lengths_as_int64", symptom=_ARRAY),
    Rule("pointers_after_8n", symptom=_ARRAY),
    Rule("documents_offset", symptom=_ARRAY),
    Rule("accepts_bad_magic"),
    Rule("bad_magic_not_valueerror"),
    formula=_Q1_FORMULA,
    texts=TEXTS["q1"])
#: q1: the wrong reads a rule names, by array — (rule, m): the array read as int64 from byte 34 + m·N
_WRONG_READS = {"sequence_lengths": [("lengths_as_int64", 0)], "sequence_pointers": [("pointers_after_8n", 8)],
                "document_indices": [("documents_offset", 8), ("documents_offset", 16)]}


def _golden(folder: Path) -> str:
    """The exercise's golden vector: uint16 documents [1..5], [6, 7], [8..14] (a 102-byte .idx)."""
    prefix = str(folder / "golden")
    b = IndexedDatasetBuilder(get_bin_path(prefix), np.uint16)
    for doc in ([1, 2, 3, 4, 5], [6, 7], list(range(8, 15))):
        b.add_document(doc)
    b.finalize(get_idx_path(prefix))
    return prefix


def _q1_array(what: str, key: str, got: Any, want: np.ndarray, raw: bytes, n: int, d: int) -> None:
    """Fail on array ``key``: with the rule whose int64 read (``_WRONG_READS``) gives ``got``, else plainly."""
    facts = {"what": what, "key": key, "got": short(np.asarray(got).tolist()), "want": short(want.tolist())}
    count = d if key == "document_indices" else n
    for name, m in _WRONG_READS[key]:
        at = 34 + m * n
        if count and n and at + 8 * count <= len(raw) and _same_array(got, np.frombuffer(raw, "<i8", count, at)):
            RULES["q1"].fail(name, **facts)
    expect(False, _ARRAY.format_map(facts))


@check(CHAPTER, "q1", hint=TEXTS["q1"].hint)
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
                    _q1_array(what, key, got[key], np.asarray(arr), raw, len(ds), len(ds.document_indices))
            del ds
        raw = Path(get_idx_path(prefixes[0])).read_bytes()
        bad = b"TNTIDX\x00\x00\x00" + raw[9:]
        try:
            parse_idx(bad)
        except ValueError:
            pass
        except Exception as exc:  # noqa: BLE001 - the learner's code refused the bad magic with another exception
            RULES["q1"].fail("bad_magic_not_valueerror", error=type(exc).__name__)
        else:
            RULES["q1"].fail("accepts_bad_magic")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return "the golden vector, 12 random .idx files (4 dtypes, empty and multi-sequence documents) and a bad magic"


def q1_header(parse_idx) -> None:
    """Step 1 of q1, not graded: only the four header fields (version, dtype code, N, D) of 3 random
    ``.idx`` files, so the header can be right before the three arrays are written. Prints one line and
    returns nothing (a returned bool would show as a stray ``True`` under the cell)."""
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
            wrong = [f"{k} = {short(got.get(k))}, expected {v}" for k, v in want.items()
                     if not _same_int(got.get(k), v)]
            expect(not wrong, "; ".join(wrong))
        print("✅ step 1 of q1: the header fields are right — now the three arrays, then check.q1")
    except CheckFailed as exc:
        print(for_the_page(f"❌ step 1 of q1: {exc}\n   hint: how many bytes does each header field take (the layout "
                           "line), and at which byte does the field after the 9-byte magic begin?"))
    except Exception as exc:  # noqa: BLE001 - the learner's code
        if isinstance(exc, NotImplementedError):
            print("🟡 step 1 of q1: not attempted — the stub still raises NotImplementedError")
        else:   # one sentence: what failed (an array read, when numpy's frombuffer raised), then the exception
            what = "header_array_crash" if "buffer" in str(exc) else "header_crash"
            said = TEXTS["q1"].say(what, error=f"{type(exc).__name__}: {short(str(exc))}",
                                   line=blame(exc, q1_header).rpartition(" (")[2].rstrip(")"))
            print(for_the_page("❌ step 1 of q1: " + said))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# q2: the byte offset of document k
_Q2_FORMULA = "offset of document k = sum(sequence_lengths[:document_indices[k]]) × itemsize"
#: small hand-made cases, checked before the random ones: (lengths, document_indices, itemsize, k)
_Q2_SMALL = [([5, 2], [0, 1, 2], 2, 1),           # one sequence per document
             ([3, 2, 4], [0, 2, 3], 2, 1),        # document 0 holds two sequences
             ([3, 4], [0, 1, 1, 2], 4, 2)]        # document 1 holds none
RULES["q2"] = Rules(
    Rule("tokens_not_bytes", wrong=lambda lengths, d, itemsize, k: int(lengths[:d[k]].astype(np.int64).sum())),
    Rule("sequence_k", wrong=lambda lengths, d, itemsize, k: int(lengths[:k].astype(np.int64).sum()) * itemsize),
    Rule("one_sequence_too_many",
         wrong=lambda lengths, d, itemsize, k: int(lengths[:d[k] + 1].astype(np.int64).sum()) * itemsize),
    formula=_Q2_FORMULA,
    texts=TEXTS["q2"])


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _q2_facts(case: tuple, got: Any) -> dict[str, Any]:
    """What the q2 messages say about ``document_byte_offset(*case)`` returning ``got``."""
    lengths, doc_idx, itemsize, k = case
    call = (f"document_byte_offset({short(lengths.tolist(), 60)}, {short(doc_idx.tolist(), 60)}, "
            f"itemsize={itemsize}, k={k})")
    first, last = int(doc_idx[k]), int(doc_idx[k + 1])
    holds = {0: "no sequence", 1: f"sequence {first}"}.get(last - first, f"sequences {first}..{last - 1}")
    return {"call": call, "got": short(got), "type": type(got).__name__, "k": k, "first": first, "itemsize": itemsize,
            "symptom": f"{call} returned {short(got)}; document {k} holds {holds}"}


def _q2_case(fn: Any, case: tuple, want: int) -> None:
    """Fail unless ``fn(*case)`` gives ``want``: with the first rule of ``RULES["q2"]`` it follows, else plainly."""
    lengths, doc_idx, itemsize, k = case
    got = fn(lengths.copy(), doc_idx.copy(), itemsize, k)
    if _is_int(got) and got == want:
        return
    facts = _q2_facts(case, got)
    expect(_is_int(got), "{call} returned {got} ({type}); expected an int".format_map(facts))
    reference = lambda lengths, d, itemsize, k: int(lengths[:d[k]].astype(np.int64).sum()) * itemsize  # noqa: E731
    diagnose(fn, RULES["q2"], [case], reference, lambda a, b: _is_int(a) and a == b, _q2_facts)
    expect(False, facts["symptom"])


@check(CHAPTER, "q2", hint=TEXTS["q2"].hint)
def q2(document_byte_offset) -> str:
    """Checked: 3 small hand-made cases, then 8 random documents of each of 10 random datasets plus every
    document right after an empty one, against IndexedDataset.document_byte_offset."""
    for lengths, doc_idx, itemsize, k in _Q2_SMALL:
        case = (np.array(lengths, dtype=np.int32), np.array(doc_idx, dtype=np.int64), itemsize, k)
        _q2_case(document_byte_offset, case, int(sum(lengths[:doc_idx[k]])) * itemsize)
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
                _q2_case(document_byte_offset, (lengths, doc_idx, itemsize, k), ds.document_byte_offset(k))
                n += 1
            del ds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    expect(n >= 80, "a checker bug: fewer than 80 documents checked")
    return ("3 hand-made cases, 8 random documents of each of 10 random datasets and every document right after "
            "an empty one")


# ---------------------------------------------------------------------------------------------
# q3: book exercise 1
RULES["q3"] = Rules(
    Rule("padding_is_packing"),
    Rule("solutions_swapped"),
    texts=TEXTS["q3"])


@check(CHAPTER, "q3", hint=TEXTS["q3"].hint)
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
        RULES["q3"].fail("padding_is_packing", problems=short(sorted(problems)))
    expect(len(problems) == 3, f"pick exactly three problems, got {len(problems)}")
    wrong = sorted(p for p in problems if p not in _PROBLEMS)
    expect(not wrong, f"{wrong} is not one of the three problems of tokenizing every step that "
           ".bin/.idx + mmap solves")
    unmatched = [(p, s) for p, s in problems.items() if [p, s] not in _ANSWER]
    if unmatched and all(any([q, s] in _ANSWER for q in problems) for s in problems.values()):
        RULES["q3"].fail("solutions_swapped", pairs=in_words(f"{p!r} → {s!r}" for p, s in unmatched))
    for p, s in unmatched:
        expect(False, f"problem {p!r}: {s!r} does not solve it")
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


# ---------------------------------------------------------------------------------------------
# q4: the tokens of document k, from the raw bytes
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


RULES["q4"] = Rules(
    Rule("first_sequence_only"),
    RULES["q2"]["sequence_k"].but(symptom="{symptom} — your result is sequence {k}", wrong=None, formula="",
                                  fix="document k starts at sequence document_indices[k], not at sequence k"),
    Rule("wrong_dtype"),
    Rule("empty_document"),
    formula=_Q4_FORMULA,
    texts=TEXTS["q4"])


def _q4_kind(got: Any, ds: IndexedDataset, raw_bin: bytes, k: int) -> str | None:
    """What is wrong with ``got`` for document k (None: nothing): only its first sequence, sequence k, another
    token type — a rule of ``RULES["q4"]`` —, not an array, or other tokens."""
    if not (isinstance(got, np.ndarray) and got.ndim == 1):
        return "not_an_array"
    if _same_array(got, ds.document(k)):
        return None
    first, last = int(ds.document_indices[k]), int(ds.document_indices[k + 1])
    if last - first > 1 and _same_array(got, ds.get(first)):
        return "first_sequence_only"
    if k < len(ds) and k != first and _same_array(got, ds.get(k)):
        return "sequence_k"
    for dtype in _DTYPES.values():
        other = _read_as(ds, raw_bin, k, dtype) if np.dtype(dtype) != ds.dtype else None
        if other is not None and _same_array(got, other):
            return "wrong_dtype"
    return "wrong_tokens"


def _q4_facts(what: str, ds: IndexedDataset, k: int, got: Any) -> dict[str, Any]:
    first, last = int(ds.document_indices[k]), int(ds.document_indices[k + 1])
    call = f"document_tokens(<{what}>, k={k})"
    holds = {0: "no sequence", 1: f"sequence {first}"}.get(last - first, f"sequences {first}..{last - 1}")
    return {"call": call, "k": k, "next": k + 1, "first": first, "code": ds.header.dtype_code,
            "symptom": f"{call} returned {short(np.asarray(got).tolist())}, expected {short(ds.document(k).tolist())}; "
                       f"document {k} holds {holds}"}


@check(CHAPTER, "q4", hint=TEXTS["q4"].hint)
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
                        RULES["q4"].fail("empty_document", **_q4_facts(what, ds, k, []),
                                         error=f"{type(exc).__name__}: {short(str(exc), 80)}")
                    kind = _q4_kind(got, ds, raw_bin, k)
                    expect(kind != "not_an_array", f"document_tokens(<{what}>, k={k}) returned {type(got).__name__}; "
                           "expected a 1-D numpy array")
                    if kind in RULES["q4"]:
                        RULES["q4"].fail(kind, **_q4_facts(what, ds, k, got))
                    if kind:
                        expect(False, _q4_facts(what, ds, k, got)["symptom"])
                    n += 1
                    multi += int(i >= 2 and d[k + 1] - d[k] > 1)     # the random datasets' own
                    empty += int(i >= 2 and d[k + 1] == d[k])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    expect(multi and empty, "a checker bug: the random datasets held no multi-sequence or no empty document")
    return ("every document of the hand-made file, a small int32 one and 8 random datasets, multi-sequence and "
            "empty ones included")


# ---------------------------------------------------------------------------------------------
# q5: the embedding rows Megatron builds for a tokenizer (the padded vocabulary)
_Q5_FORMULA = ("multiple = divisible_by × tensor_parallel; padded = ceil(vocab_size / multiple) × multiple, in "
               "integers -(-vocab_size // multiple) * multiple; a vocab_size already on a multiple stays")
#: (vocab_size, divisible_by, tensor_parallel), smallest first: three hand-made ones that show every mistake, then
#: Megatron's own sizes and the edges (on a multiple, a multiple + 1, TP 1, 2, 3 and 8, divisible_by 1, 64 and 128)
_Q5_SMALL = [(5, 4, 1), (8, 4, 1), (5, 2, 2)]
_Q5_EDGES = _Q5_SMALL + [
    (1, 128, 1), (1, 128, 8), (1000, 1, 1), (1001, 1, 3), (192, 64, 3), (193, 64, 3), (257, 64, 3),
    (128, 128, 1), (129, 128, 1), (256, 128, 2), (257, 128, 2), (1024, 128, 8), (1025, 128, 8),
    (8000, 128, 1), (8000, 128, 2), (32_000, 128, 1), (32_000, 128, 2), (32_001, 128, 1), (50_257, 128, 1),
    (50_257, 128, 8), (65_400, 128, 2), (128_256, 128, 8), (151_643, 128, 3), (256_000, 64, 8)]
#: how many random cases q5 draws after the edges (the count its success line states)
Q5_RANDOM = 40


def _q5_right(vocab: int, divisible_by: int, tp: int) -> int:
    return V.padded_vocab_size(vocab, divisible_by, tp)


def _q5_facts(case: tuple, got: Any) -> dict[str, Any]:
    """What the q5 messages say about ``padded_vocab_size(*case)`` returning ``got`` (an int when a rule names it)."""
    vocab, divisible_by, tp = case
    multiple, want = divisible_by * tp, _q5_right(*case)
    facts = {"call": f"padded_vocab_size({vocab}, divisible_by={divisible_by}, tensor_parallel={tp})",
             "got": short(got), "want": want, "vocab": vocab, "divisible_by": divisible_by, "tp": tp,
             "multiple": multiple, "k": vocab // multiple}
    if _is_int(got):
        got = int(got)
        per = got / tp
        facts.update(
            got=got,
            split=(f"{int(per)} rows per rank, not a multiple of {divisible_by}" if per.is_integer()
                   else f"{got} / {tp} = {per:.4g} rows per rank, not a whole number"),
            missing=f"id {vocab - 1}" if got == vocab - 1 else f"ids {got} … {vocab - 1}",
            added=f"not a multiple of {multiple}" if got % multiple else f"one multiple of {multiple} more than needed")
    return facts


RULES["q5"] = Rules(
    Rule("ignores_tp", wrong=lambda vocab, d, tp: -(-vocab // d) * d),
    Rule("always_adds", wrong=lambda vocab, d, tp: (vocab // (d * tp) + 1) * d * tp),
    Rule("rounds_down", wrong=lambda vocab, d, tp: vocab // (d * tp) * d * tp),
    Rule("adds_multiple_not_rounds", wrong=lambda vocab, d, tp: vocab + d * tp),
    formula=_Q5_FORMULA,
    texts=TEXTS["q5"])


def _q5_cases(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Q5_RANDOM random cases: vocabularies of every size, about half of them on a multiple or one past it."""
    cases = []
    for _ in range(Q5_RANDOM):
        divisible_by = int(rng.choice([1, 8, 64, 128, 128, 256, int(rng.integers(1, 300))]))
        tp = int(rng.choice([1, 2, 3, 4, 8, int(rng.integers(1, 17))]))
        multiple = divisible_by * tp
        vocab = int(rng.choice([int(rng.integers(1, 2000)), int(rng.integers(2000, 300_000)),
                                multiple * int(rng.integers(1, 200)), multiple * int(rng.integers(1, 200)) + 1]))
        cases.append((vocab, divisible_by, tp))
    return cases


@check(CHAPTER, "q5", hint=TEXTS["q5"].hint)
def q5(padded_vocab_size) -> str:
    """Checked: the hand-made and edge cases of :data:`_Q5_EDGES`, then :data:`Q5_RANDOM` random ones, each an
    int equal to :func:`labsupport.models.vocab_padding.padded_vocab_size`."""
    cases = _Q5_EDGES + _q5_cases(np.random.default_rng(check_seed()))
    for case in cases:
        got, want = padded_vocab_size(*case), _q5_right(*case)
        if _is_int(got) and got == want:
            continue
        facts = _q5_facts(case, got)
        expect(_is_int(got), f"{facts['call']} returned {facts['got']} ({type(got).__name__}); expected an int, "
                             "a number of embedding rows")
        explain(padded_vocab_size, RULES["q5"].values(), case, int(got), _q5_right,
                lambda a, b: _is_int(a) and a == b, lambda rule: _Q5_EDGES, _q5_facts)
        expect(False, f"{facts['call']} returned {facts['got']}, expected {want} (a multiple of {facts['multiple']})")
    return (f"{len(_Q5_EDGES)} edge cases (on a multiple, a multiple + 1, TP 1, 2, 3 and 8, divisible_by 1, 64 and "
            f"128) and {Q5_RANDOM} random ones, each the rows Megatron builds")
