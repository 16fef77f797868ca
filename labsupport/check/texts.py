"""The feedback texts of the exercise checks, kept as data (chapters 0–6).

Each chapter's prose lives in ``labsupport/check/texts/chNN.toml``, by question::

    [q1]
    hint = ["a nudge", "the idea", "the formula"]   # the tiers a question's failures show in turn
    formula = "…"                                    # the formula tier of every rule without its own

    [q1.strided]                                     # one named mistake (a rule of check/chNN.py)
    symptom = "{call} returned {got}: …"             # always shown; filled from the failing case
    ask = "…"                                        # the first time
    fix = "…"                                        # on a repeat
    formula = "…"                                    # from the third time on (optional)

    [q4.mean_of_means.symptom]                       # a text that depends on one fact of the case:
    if = "small"                                     # facts["small"] true → "then", else "else"
    then = "…"
    else = "…"

    [q4.messages]                                    # not a rule: the check's other texts, by key
    wrong_share = "(a) padding share {share}: …"     # (a plain failure's message, a model answer)

    [q4.options.waste]                               # not a rule: a multiple-choice question's
    compute = "GPU compute (FLOPs) spent on pad tokens"   # options, key → text, in this order

Texts are ``str.format`` templates over a failing case's facts (a literal brace is doubled); a
text that needs logic stays a callable in the chapter module.  A message is filled by the check
itself (``texts.messages["wrong_share"].format(share=…)``); options are shown as they are.  The
code says *which* mistakes a question knows and how to recognise them
(:mod:`labsupport.check.rules`); these files say what the learner reads — one place to reword
feedback, and the source a translation starts from.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

TEXT_DIR = Path(__file__).with_name("texts")
FIELDS = ("symptom", "ask", "fix", "formula")


@dataclass(frozen=True)
class Choice:
    """A text that depends on one fact: ``then`` when ``facts[key]`` is true, else ``otherwise``."""

    key: str
    then: str
    otherwise: str

    def __call__(self, facts: Mapping[str, Any]) -> str:
        return (self.then if facts[self.key] else self.otherwise).format_map(facts)


def _text(where: str, value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) != {"if", "then", "else"}:
            raise ValueError(f"{where}: a text table has exactly the keys if, then, else")
        return Choice(value["if"], value["then"], value["else"])
    return value


def _strings(where: str, table: Any) -> dict[str, str]:
    """A ``[qN.messages]`` or ``[qN.options.NAME]`` table: text keys to texts, in file order."""
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ValueError(f"{where}: must be a table of texts (key = \"…\")")
    return dict(table)


def _tables(where: str, value: Any) -> list[tuple[str, Any]]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must hold one table per option list")
    return list(value.items())


@dataclass(frozen=True)
class QuestionTexts:
    """One question's texts: its hint tiers, its default formula, each rule's feedback, and the
    texts that belong to no rule: its messages and its multiple-choice options."""

    question: str
    hint: Any = ""
    formula: str | None = None
    rules: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)         #: ``[qN.messages]``: key → template
    options: Mapping[str, dict[str, str]] = field(default_factory=dict)   #: ``[qN.options.NAME]``: key → text


@functools.lru_cache(maxsize=None)
def load_texts(chapter: str) -> dict[str, QuestionTexts]:
    """The texts of ``chapter`` (``"ch06"``), by question; the hint tiers become a tuple."""
    with open(TEXT_DIR / f"{chapter}.toml", "rb") as handle:
        data = tomllib.load(handle)
    texts = {}
    for question, entry in data.items():
        hint = entry.get("hint", "")
        rules = {}
        messages = _strings(f"{chapter}.toml [{question}.messages]", entry.get("messages", {}))
        options = {name: _strings(f"{chapter}.toml [{question}.options.{name}]", table)
                   for name, table in _tables(f"{chapter}.toml [{question}.options]", entry.get("options", {}))}
        for name, value in entry.items():
            if not isinstance(value, dict) or name in ("messages", "options"):
                continue
            where = f"{chapter}.toml [{question}.{name}]"
            unknown = set(value) - set(FIELDS)
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
            rules[name] = {f: _text(f"{where} {f}", text) for f, text in value.items()}
        texts[question] = QuestionTexts(question, tuple(hint) if isinstance(hint, list) else hint,
                                        entry.get("formula"), rules, messages, options)
    return texts
