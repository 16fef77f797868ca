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

    [q1.messages]                                    # not a rule: the question's other texts, by key
    not_a_list = "{call} returned {got}; expected a list"   # e.g. a plain failure (QuestionTexts.say)

Texts are ``str.format`` templates over a failing case's facts (a literal brace is doubled); a
text that needs logic stays a callable in the chapter module.  A ``[qN.messages]`` table is no rule:
it holds the question's other texts (its plain failure messages, a text a family of rules shares),
which the module fills with :meth:`QuestionTexts.say`.  The code says *which* mistakes a
question knows and how to recognise them (:mod:`labsupport.check.rules`); these files say what the
learner reads — one place to reword feedback, and the source a translation starts from.
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


@dataclass(frozen=True)
class QuestionTexts:
    """One question's texts: its hint tiers, its default formula, each rule's feedback and its
    other messages (the ``[qN.messages]`` table, no rule)."""

    question: str
    hint: Any = ""
    formula: str | None = None
    rules: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)

    def say(self, message: str, /, **facts: Any) -> str:
        """The text ``message`` of the ``[qN.messages]`` table, filled from ``facts`` (``str.format``)."""
        return self.messages[message].format_map(facts)


@functools.lru_cache(maxsize=None)
def load_texts(chapter: str) -> dict[str, QuestionTexts]:
    """The texts of ``chapter`` (``"ch06"``), by question; the hint tiers become a tuple."""
    with open(TEXT_DIR / f"{chapter}.toml", "rb") as handle:
        data = tomllib.load(handle)
    texts = {}
    for question, entry in data.items():
        hint = entry.get("hint", "")
        rules = {}
        for name, value in entry.items():
            if not isinstance(value, dict) or name == "messages":
                continue
            where = f"{chapter}.toml [{question}.{name}]"
            unknown = set(value) - set(FIELDS)
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
            rules[name] = {f: _text(f"{where} {f}", text) for f, text in value.items()}
        texts[question] = QuestionTexts(question, tuple(hint) if isinstance(hint, list) else hint,
                                        entry.get("formula"), rules, entry.get("messages", {}))
    return texts
