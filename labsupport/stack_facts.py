"""The dated stack facts of ``labsupport/stack.toml`` (chapters 0 and 5): ch 0's map and defaults, ch 5's NCCL table.

What goes stale (versions, dates, what moved where, NCCL's variable table, the stack defaults a statement
rests on) lives in one data file; chapter 0 renders its table
of the stack from it (:func:`map_rows`, :func:`as_of_line`), and ``tests/project/test_stack_facts.py``
uses :func:`unknown_versions` to fail when a chapter notebook states a version that the file does not
list.

The version rule, kept simple on purpose (:func:`version_mentions`):

* a stack's name (an entry's ``names``, e.g. ``NeMo``, ``megatron-core``, ``core_v``) followed by a
  version — ``NeMo 2.0``, ``NeMo 1.x``, ``megatron-core 0.16.1``, ``core_v0.16.1``,
  ``Megatron-Bridge v0.6.0`` — states that version of that stack;
* a bare ``vX.Y.Z`` (``v2.5.0rc0``) within 40 characters after a stack's name on the same line states a
  version of the nearest name before it.

A stated version must be in the ``versions`` of an entry carrying that name. The book's own generation
(NeMo 1.x and 2.0) is an entry too, marked ``book = true``, so the book's description stays allowed and
is shown as the book's.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["STACK_FILE", "StackEntry", "StackFacts", "load_stack", "version_mentions", "unknown_versions",
           "map_rows", "as_of_line", "provenance_rows", "VariableTable", "load_nccl_variables",
           "StackDefault", "load_defaults", "default_rows"]

STACK_FILE = Path(__file__).resolve().with_name("stack.toml")
FIELDS = ("id", "name", "names", "role", "versions", "book", "status", "source", "checked")
#: how far after a stack's name a bare vX.Y.Z still belongs to it (characters, same line)
NEAR = 40


@dataclass(frozen=True)
class StackEntry:
    """One part of the stack: what it is now, the versions the workbook states, and where that was read."""

    id: str
    name: str
    names: tuple[str, ...]
    role: str
    versions: tuple[str, ...]
    book: bool
    status: str
    source: str
    checked: date


@dataclass(frozen=True)
class StackFacts:
    """Every entry of the file; ``as_of`` is the latest ``checked`` date."""

    entries: tuple[StackEntry, ...]

    @property
    def as_of(self) -> date:
        return max(e.checked for e in self.entries)

    def entry(self, entry_id: str) -> StackEntry:
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise KeyError(f"error: stack entry {entry_id!r}: use one of {[e.id for e in self.entries]}")

    def versions_of(self, name: str) -> set[str]:
        """Every version listed by an entry that carries ``name`` (NeMo: the book's generation and 3.0)."""
        return {v for e in self.entries if name in e.names for v in e.versions}


def _read(path: Path) -> dict:
    with open(path, "rb") as handle:
        return tomllib.load(handle)


def _dated(raw: dict, where: str) -> None:
    if not isinstance(raw["checked"], date):
        raise ValueError(f"error: {where} checked = {raw['checked']!r}: write a TOML date such as 2026-12-01")


def _entry(raw: dict, where: str) -> StackEntry:
    missing = [f for f in FIELDS if f not in raw]
    unknown = sorted(set(raw) - set(FIELDS))
    if missing or unknown:
        raise ValueError(f"error: {where}: missing {missing} / unknown {unknown} fields: give exactly {list(FIELDS)}")
    _dated(raw, where)
    if not raw["source"].strip():
        raise ValueError(f"error: {where}: empty source: name the URL or repository file @ version read")
    return StackEntry(raw["id"], raw["name"], tuple(raw["names"]), raw["role"], tuple(raw["versions"]),
                      bool(raw["book"]), raw["status"], raw["source"], raw["checked"])


def load_stack(path: str | Path = STACK_FILE) -> StackFacts:
    """Read and check the stack file (each entry needs every field, a dated ``checked`` and a source)."""
    path = Path(path)
    raw = _read(path).get("entry", [])
    if not raw:
        raise ValueError(f"error: {path}: no [[entry]] tables: add one per part of the stack")
    entries = tuple(_entry(r, f"{path.name} entry {i} ({r.get('id', '?')})") for i, r in enumerate(raw))
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"error: {path.name}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}: "
                         "give each entry its own id")
    return StackFacts(entries)


@dataclass(frozen=True)
class VariableTable:
    """NCCL's environment variables as chapter 5 checks them: ``facts`` maps name → (status, fact)."""

    source: str
    checked: date
    facts: dict[str, tuple[str, str]]


def load_nccl_variables(path: str | Path = STACK_FILE, statuses: tuple[str, ...] | None = None) -> VariableTable:
    """Read the ``[nccl_variables]`` header and the ``[[nccl_variable]]`` rows (name, status, fact) of the file.

    ``statuses``, when given, are the only status values a row may carry."""
    path = Path(path)
    data = _read(path)
    head, rows = data.get("nccl_variables", {}), data.get("nccl_variable", [])
    if not isinstance(head.get("checked"), date) or not str(head.get("source", "")).strip() or not rows:
        raise ValueError(f"error: {path.name} [nccl_variables]: give a source, a TOML date as checked and "
                         "[[nccl_variable]] rows")
    facts: dict[str, tuple[str, str]] = {}
    for i, row in enumerate(rows):
        where = f"{path.name} nccl_variable {i} ({row.get('name', '?')})"
        if sorted(row) != ["fact", "name", "status"]:
            raise ValueError(f"error: {where}: fields {sorted(row)}: give exactly name, status and fact")
        if statuses is not None and row["status"] not in statuses:
            raise ValueError(f"error: {where}: status {row['status']!r}: use one of {list(statuses)}")
        if row["name"] in facts:
            raise ValueError(f"error: {where}: {row['name']} is listed twice: keep one row")
        facts[row["name"]] = (row["status"], row["fact"])
    return VariableTable(str(head["source"]), head["checked"], facts)


DEFAULT_FIELDS = ("id", "stack", "setting", "value", "effect", "source", "checked")


@dataclass(frozen=True)
class StackDefault:
    """A setting's value when nobody sets it, which a chapter's statement rests on."""

    id: str
    stack: str
    setting: str
    value: str
    effect: str
    source: str
    checked: date


def load_defaults(path: str | Path = STACK_FILE) -> dict[str, StackDefault]:
    """The ``[[default]]`` rows of the file by id (every field given, ``checked`` a TOML date)."""
    path = Path(path)
    rows = _read(path).get("default", [])
    out: dict[str, StackDefault] = {}
    for i, row in enumerate(rows):
        where = f"{path.name} default {i} ({row.get('id', '?')})"
        if sorted(row) != sorted(DEFAULT_FIELDS):
            raise ValueError(f"error: {where}: fields {sorted(row)}: give exactly {list(DEFAULT_FIELDS)}")
        _dated(row, where)
        if row["id"] in out:
            raise ValueError(f"error: {where}: the id is used twice: give each default its own id")
        out[row["id"]] = StackDefault(**{f: row[f] for f in DEFAULT_FIELDS})
    return out


def default_rows(path: str | Path = STACK_FILE) -> list[tuple[str, str, str, str]]:
    """(stack, setting = default, effect, source @ checked) for chapter 0's appendix."""
    return [(d.stack, f"{d.setting} = {d.value}", d.effect, f"{d.source} ({d.checked.isoformat()})")
            for d in load_defaults(path).values()]


@lru_cache(maxsize=1)
def _default() -> StackFacts:
    return load_stack()


_VERSION = r"v?(\d+(?:\.(?:\d+|x))+(?:rc\d+)?)(?![\w.])"
_BARE = re.compile(r"(?<![\w.])v(\d+\.\d+\.\d+(?:rc\d+)?)(?![\w.])")


def _names(facts: StackFacts) -> list[str]:
    return sorted({n for e in facts.entries for n in e.names}, key=len, reverse=True)


def version_mentions(text: str, facts: StackFacts | None = None) -> list[tuple[str, str]]:
    """The (stack name, version) pairs ``text`` states, by the rule in this module's docstring."""
    facts = facts or _default()
    alias = "|".join(re.escape(n) for n in _names(facts))
    direct = re.compile(rf"(?<![\w-])({alias})(?:[ -]|(?<=_[vr]))?{_VERSION}")
    name_at = re.compile(rf"(?<![\w-])({alias})(?![\w-])")
    found: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    for m in direct.finditer(text):
        found.append((m.group(1), m.group(2)))
        spans.append(m.span(2))
    for m in _BARE.finditer(text):
        if any(a <= m.start(1) < b for a, b in spans):
            continue
        before = text[max(0, m.start() - NEAR):m.start()].rsplit("\n", 1)[-1]
        names = list(name_at.finditer(before))
        if names:
            found.append((names[-1].group(1), m.group(1)))
    return found


def unknown_versions(text: str, facts: StackFacts | None = None) -> list[str]:
    """Stated versions that no entry carrying that name lists, as ``"name version"``."""
    facts = facts or _default()
    return [f"{name} {v}" for name, v in version_mentions(text, facts) if v not in facts.versions_of(name)]


def as_of_line(facts: StackFacts | None = None) -> str:
    """The dated line above chapter 0's map."""
    facts = facts or _default()
    return f"The stack as of {facts.as_of.isoformat()} (labsupport/stack.toml; sources and dates: the appendix):"


def map_rows(facts: StackFacts | None = None) -> list[tuple[str, str, str]]:
    """(part, what it is now, status) for chapter 0's map; the book's generation is marked as such."""
    facts = facts or _default()
    return [(e.name + (" — the book's generation" if e.book else ""), e.role, e.status) for e in facts.entries]


def provenance_rows(facts: StackFacts | None = None) -> list[tuple[str, str, str, str]]:
    """(part, versions, source, checked) for chapter 0's appendix."""
    facts = facts or _default()
    return [(e.name, ", ".join(e.versions) or "–", e.source, e.checked.isoformat()) for e in facts.entries]
