"""What a question's check compares with, found by what the code calls (the grader; every chapter's exercises).

A *reference* is a ``labsupport`` function outside ``labsupport.check`` that a check uses to know the
right answer.  :func:`references` starts from the functions the check and its ``labsupport.check``
helpers name (:mod:`.exercise` finds those), and closes over

* **callers in the same module** — a function or method of a reference's module that calls a
  reference is another way to the same answer (``MegatronPretrainingSampler.__iter__`` slices with
  ``rank_slice``); and then over
* **callees** — everything a reference calls inside ``labsupport`` (helpers, engines, the classes it
  builds, their methods), except the plumbing of :data:`PLUMBING` (paths, files, progress bars), which
  answers nothing.

:func:`reached` is the callee closure alone, without the plumbing rule: the grader keeps in the
student's copy everything the exercise's own setup cells reach that way (:mod:`.stubs`).
Specs are ``"module:qualname"`` strings throughout.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from typing import Any, Iterable

#: modules whose functions are never a reference: they move files and print, they compute no answer
PLUMBING = ("labsupport.paths", "labsupport.fileio", "labsupport.datasets.utils", "labsupport.progress",
            "labsupport.env", "labsupport.cli", "labsupport.workbook", "labsupport.pages", "labsupport.check")


def code_names(code: types.CodeType) -> set[str]:
    """Every global and attribute name ``code`` and its nested functions use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_names(const)
    return names


def _ours(obj: Any) -> bool:
    mod = getattr(obj, "__module__", "") or getattr(obj, "__name__", "")
    return mod.startswith("labsupport.") and not mod.startswith("labsupport.check")


def _function(member: Any) -> Any:
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if isinstance(member, property):
        member = member.fget
    return inspect.unwrap(member) if inspect.isfunction(member) else None


def _written(fn: Any, cls: type) -> bool:
    """``fn`` is written in ``cls``'s module (not made by ``dataclass`` or ``namedtuple``)."""
    module = sys.modules.get(cls.__module__)
    return fn is not None and fn.__code__.co_filename == getattr(module, "__file__", None)


def _methods(cls: type, names: Iterable[str] | None = None) -> set[str]:
    """``cls``'s own functions written in its source (those in ``names`` only, when given) as specs."""
    return {f"{cls.__module__}:{cls.__qualname__}.{attr}" for attr, member in vars(cls).items()
            if _written(_function(member), cls) and (names is None or attr in names)}


def named(names: set[str], scope: dict[str, Any], whole_classes: bool = False) -> set[str]:
    """The labsupport functions ``names`` reach in ``scope``: functions; methods of classes it names (all of a
    class's methods with ``whole_classes``: building or iterating one calls them without naming them);
    functions of modules it names."""
    out: set[str] = set()
    for name in names:
        obj = scope.get(name)
        if obj is None or not _ours(obj):
            continue
        if inspect.isfunction(obj):
            out.add(f"{obj.__module__}:{obj.__qualname__}")
        elif inspect.isclass(obj):
            out |= _methods(obj, None if whole_classes else names)
        elif inspect.ismodule(obj):
            out |= {f"{m.__module__}:{m.__qualname__}" for attr in names
                    if inspect.isfunction(m := getattr(obj, attr, None)) and _ours(m)}
    return out


def resolve(spec: str) -> Any:
    """The function a spec names (None when it names none)."""
    module, _, qual = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = inspect.getattr_static(obj, part)
    except (ImportError, AttributeError):
        return None
    return _function(obj)


@functools.lru_cache(maxsize=None)
def _callees(spec: str) -> frozenset[str]:
    """What ``spec`` calls inside labsupport (read once per process: the grader asks for every submission)."""
    fn = resolve(spec)
    if fn is None or not _ours(fn):
        return frozenset()
    names = code_names(fn.__code__)
    out = named(names, fn.__globals__, whole_classes=True)
    module, _, qual = spec.partition(":")
    owner = inspect.getattr_static(importlib.import_module(module), qual.split(".")[0], None)
    if inspect.isclass(owner) and "." in qual:               # self.helper(): the class's own methods it names
        out |= _methods(owner, names)
    return frozenset(out)


def reached(seeds: Iterable[str], skip: tuple[str, ...] = ()) -> set[str]:
    """``seeds`` and everything they call inside labsupport, transitively (not entering modules in ``skip``)."""
    seen, todo = set(seeds), list(seeds)
    while todo:
        for spec in _callees(todo.pop()):
            if spec not in seen and not spec.startswith(skip):
                seen.add(spec)
                todo.append(spec)
    return seen


def _module_functions(module: types.ModuleType) -> dict[str, Any]:
    """``{spec: function}`` of a module's own functions and its classes' methods."""
    out = {}
    for obj in vars(module).values():
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            out[f"{module.__name__}:{obj.__qualname__}"] = inspect.unwrap(obj)
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            out |= {spec: resolve(spec) for spec in _methods(obj)}
    return out


def callers(specs: Iterable[str]) -> set[str]:
    """``specs`` and the functions of their modules that call one of them (by name, ``self.`` included),
    transitively."""
    found = set(specs)
    for module_name in {s.partition(":")[0] for s in found}:
        members = _module_functions(importlib.import_module(module_name))
        grown = True
        while grown:
            last = {s.rpartition(":")[2].split(".")[-1] for s in found if s.startswith(module_name + ":")}
            more = {s for s, fn in members.items() if s not in found and fn and code_names(fn.__code__) & last}
            found |= more
            grown = bool(more)
    return found


def references(roots: Iterable[str]) -> list[str]:
    """The references of a check whose body and helpers name ``roots``: everything they call outside
    :data:`PLUMBING`, and their callers in the same module (other ways to the same answer)."""
    return sorted(reached(roots, skip=PLUMBING) | callers(roots))
