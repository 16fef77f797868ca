"""Plain data across the process boundary between the grader and a student's worker.

Values travel as JSON: ``None``, ``bool``, ``int``, ``float`` and ``str`` as themselves; every
other supported type as a tagged object (``{"$t": tag, ...}``): lists, tuples, dicts (as key/value
pairs, so any key type survives), sets, bytes, numpy arrays and scalars (dtype, shape and raw
bytes), torch tensors (as numpy arrays), ``labsupport`` tokenizers (their model bytes) and OmegaConf
configs (their plain container, rebuilt with ``OmegaConf.create``).
Nothing is pickled; an object of any other type arrives as :class:`Opaque` — its ``repr``
only — so a student's object with an overridden ``__eq__`` compares like a foreign object
(never equal to the expected value).

:func:`decode` is strict about what the grader rebuilds from a student's reply: nesting at most
``MAX_DEPTH`` deep, arrays of at most ``MAX_ITEMS`` elements *and* at most that many sub-lists
(``np.empty((2**40, 0))`` holds no element but would make 2^40 lists in a message), and an
OmegaConf config whose strings are literal text — an interpolation such as
``${oc.env:LABSUPPORT_CHECK_SEED}`` is escaped, so nothing of the grader's environment is resolved
into a message — and integers of at most ``MAX_INT_DIGITS`` digits (``10**400`` is no answer any check
takes; a float conversion of it would be reported as the checker's error).  :func:`encode` writes a
string's lone surrogates (text no UTF-8 file can hold) as U+FFFD, so such an answer is still read.
"""
from __future__ import annotations

import base64
import itertools
import math
import types
from typing import Any

import numpy as np
from labsupport.datasets.tokenizer import Tokenizer
from labsupport.workbook.grading.terminal import printable

MAX_DEPTH = 64
MAX_ITEMS = 10_000_000
MAX_INT_DIGITS = 308    # the largest float is about 1.8e308
_LAZY = (types.GeneratorType, map, filter, zip, range, reversed, enumerate,
         type({}.keys()), type({}.values()), type({}.items()))


class Opaque:
    """Stand-in for a value of a type that does not travel (its type name and repr only)."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = object.__hash__


class EncodeError(TypeError):
    """A value that cannot be carried as plain data."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _array(arr: np.ndarray) -> dict:
    if arr.dtype.hasobject:
        return {"$t": "ndobj", "shape": list(arr.shape), "items": [encode(x) for x in arr.reshape(-1).tolist()]}
    shape = list(arr.shape)  # (np.ascontiguousarray makes a 0-d array 1-d)
    return {"$t": "nd", "dtype": arr.dtype.str, "shape": shape, "data": _b64(np.ascontiguousarray(arr).tobytes())}


def encode(value: Any, _depth: int = 0) -> Any:
    """``value`` as JSON-able plain data (see the module docstring)."""
    if _depth > MAX_DEPTH:
        raise EncodeError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is str:
        return printable(value)
    if kind is int:
        return value if abs(value) < 2 ** 53 else {"$t": "bigint", "v": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"$t": "float", "v": repr(value)}
    d = _depth + 1
    if kind is list:
        return {"$t": "list", "v": [encode(x, d) for x in value]}
    if kind is tuple:
        return {"$t": "tuple", "v": [encode(x, d) for x in value]}
    if kind in (set, frozenset):
        return {"$t": kind.__name__, "v": [encode(x, d) for x in value]}
    if kind is dict:
        return {"$t": "dict", "v": [[encode(k, d), encode(v, d)] for k, v in value.items()]}
    if kind in _LAZY:  # a generator, map, range, dict view ...: the items it yields (at most MAX_ITEMS)
        items = list(itertools.islice(value, MAX_ITEMS + 1))
        if len(items) > MAX_ITEMS:
            raise EncodeError(f"{kind.__name__} yields more than {MAX_ITEMS} items")
        return {"$t": "list", "v": [encode(x, d) for x in items]}
    if kind in (bytes, bytearray):
        return {"$t": "bytes", "v": _b64(bytes(value))}
    if isinstance(value, np.ndarray):
        return _array(value)
    if isinstance(value, np.generic):
        arr = _array(np.asarray(value))
        arr["$t"] = "npscalar"
        return arr
    module = getattr(kind, "__module__", "") or ""
    if module.startswith("torch") and hasattr(value, "detach"):
        return _array(value.detach().cpu().numpy())
    if module.startswith("omegaconf") and kind.__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf  # noqa: PLC0415 - omegaconf only for config values (start-up time of the grading worker)

        return {"$t": "omegaconf", "v": encode(OmegaConf.to_container(value, resolve=True), d)}
    if module == "labsupport.datasets.tokenizer" and kind.__name__ == "Tokenizer":
        return {"$t": "tokenizer", "name": value.path.name, "model": _b64(value._proto)}
    # subclasses of the plain types (a student's int with its own __eq__, a defaultdict, ...):
    # keep the plain value only, so no method of theirs reaches the grader
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return encode(int.__index__(value), _depth)
    if isinstance(value, float):
        return encode(float.__float__(value), _depth)
    if isinstance(value, str):
        return printable(str.__str__(value))
    if isinstance(value, dict):
        return {"$t": "dict", "v": [[encode(k, d), encode(v, d)] for k, v in dict.items(value)]}
    if isinstance(value, (list, tuple)):
        return {"$t": "tuple" if isinstance(value, tuple) else "list",
                "v": [encode(x, d)
                      for x in (tuple.__iter__(value) if isinstance(value, tuple) else list.__iter__(value))]}
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises
        text = f"<{kind.__name__} object>"
    return {"$t": "opaque", "type": kind.__name__, "repr": text[:300]}


_TOKENIZERS: dict[str, Any] = {}


def _shape(data: dict) -> tuple[int, ...]:
    shape = data.get("shape")
    if not (isinstance(shape, list) and len(shape) <= 32 and all(type(n) is int and n >= 0 for n in shape)):
        raise EncodeError("an array's shape must be a list of at most 32 sizes")
    lists = 1
    for n in shape:   # the elements, and the lists tolist() would build around them
        lists *= max(n, 1)
        if lists > MAX_ITEMS:
            raise EncodeError(f"an array of shape {tuple(shape)} is larger than {MAX_ITEMS} items")
    return tuple(shape)


def _literal(value: Any) -> Any:
    """A plain container's strings with OmegaConf interpolations escaped (``${`` → ``\\${``)."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, dict):
        return {_literal(k): _literal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_literal(v) for v in value]
    return value


def decode(data: Any, _depth: int = 0) -> Any:
    """The value :func:`encode` carried (plain Python / numpy objects; :class:`Opaque` otherwise)."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if _depth > MAX_DEPTH:
        raise EncodeError("value nested too deeply")
    d = _depth + 1
    if isinstance(data, list):  # untagged lists only come from hand-written messages
        return [decode(x, d) for x in data]
    if not isinstance(data, dict) or "$t" not in data:
        raise EncodeError(f"not an encoded value: {str(data)[:80]}")
    tag = data["$t"]
    if tag == "list":
        return [decode(x, d) for x in data["v"]]
    if tag == "tuple":
        return tuple(decode(x, d) for x in data["v"])
    if tag in ("set", "frozenset"):
        items = [decode(x, d) for x in data["v"]]
        return set(items) if tag == "set" else frozenset(items)
    if tag == "dict":
        return {decode(k, d): decode(v, d) for k, v in data["v"]}
    if tag == "bytes":
        return _unb64(data["v"])
    if tag == "bigint":
        digits = str(data["v"]).lstrip("-")
        if len(digits) > MAX_INT_DIGITS:
            raise EncodeError(f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS}: no answer needs more)")
        return int(data["v"])
    if tag == "float":
        return float(data["v"])
    if tag in ("nd", "npscalar"):
        dtype = np.dtype(data["dtype"])
        if dtype.hasobject:
            raise EncodeError("object arrays do not travel as raw bytes")
        arr = np.frombuffer(_unb64(data["data"]), dtype=dtype).reshape(_shape(data)).copy()
        return arr[()] if tag == "npscalar" else arr
    if tag == "ndobj":
        shape = _shape(data)
        items = [decode(x, d) for x in data["items"]]
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        return arr.reshape(shape)
    if tag == "tokenizer":

        key = data["model"]
        if key not in _TOKENIZERS:
            _TOKENIZERS[key] = Tokenizer.from_bytes(_unb64(key), data["name"])
        return _TOKENIZERS[key]
    if tag == "omegaconf":
        from omegaconf import OmegaConf  # noqa: PLC0415 - omegaconf only for config values (start-up time of the grading worker)

        plain = decode(data["v"], d)
        if not isinstance(plain, (dict, list)):
            raise EncodeError("an OmegaConf value must be a dict or a list")
        return OmegaConf.create(_literal(plain))
    if tag == "opaque":
        return Opaque(str(data["type"]), str(data["repr"])[:300])
    raise EncodeError(f"unknown tag {tag!r}")


def write_back(original: Any, changed: Any) -> None:
    """Copy what the student's function did to its (copied) arguments back onto the grader's
    originals, in place, so a check that tests "the input was not modified" still sees it."""
    if isinstance(original, np.ndarray) and isinstance(changed, np.ndarray):
        if original.shape == changed.shape and original.flags.writeable:
            try:
                np.copyto(original, changed, casting="unsafe")
            except (TypeError, ValueError):
                pass
        return
    if isinstance(original, list) and isinstance(changed, list):
        if len(original) == len(changed):
            for i, (o, c) in enumerate(zip(original, changed)):
                if isinstance(o, (np.ndarray, list, dict)) and type(o) is type(c):
                    write_back(o, c)
                elif not (isinstance(o, np.ndarray) or isinstance(c, np.ndarray)):
                    if o is not c and not _same(o, c):
                        original[i] = c
        else:
            original[:] = changed
        return
    if isinstance(original, dict) and isinstance(changed, dict):
        if not _same(original, changed):
            original.clear()
            original.update(changed)


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return False
