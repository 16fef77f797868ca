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

    [q4.options.effects]                             # not a rule: the options of a multiple-choice part
    more_code_skill = "a larger code share …"        # option key = its text (QuestionTexts.options)

Texts are ``str.format`` templates over a failing case's facts (a literal brace is doubled); a
text that needs logic stays a callable in the chapter module.  A ``[qN.messages]`` table is no rule:
it holds the question's other texts (its plain failure messages, a text a family of rules shares),
which the module fills with :meth:`QuestionTexts.say`; nor is ``[qN.options]``, whose tables are
the option lists of a multiple-choice part (key → text, in the file's order).  The code says
*which* mistakes a question knows and how to recognise them (:mod:`labsupport.check.rules`); these
files say what the learner reads — one place to reword feedback, and the source a translation
starts from.

**Languages.** ``texts/ko.po`` is a gettext catalog of these texts in Korean (msgid: the English
template; ``#:`` where it is used); ``python -m labsupport translations`` keeps it in step with the
TOML files.  :func:`language` chooses the language of the feedback (``check.language("ko")``, or
``LABSUPPORT_LANG=ko`` in the kernel's environment, which ``make lab-ko`` sets); every template,
hint tier and message is looked up by its English text when it is shown (:func:`translate`), so a
switch applies at once.  A text built in code (the pass/fail line, a callable text) stays English.
"""
from __future__ import annotations

import functools
import os
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
NOT_RULES = ("messages", "options")   # sub-tables of a question that are no rule
LANGUAGES = ("en", "ko")              # en: the TOML files themselves; the others: texts/<lang>.po
LANGUAGE_VARIABLE = "LABSUPPORT_LANG"
_LANGUAGE = [os.environ.get(LANGUAGE_VARIABLE) if os.environ.get(LANGUAGE_VARIABLE) in LANGUAGES else "en"]


def language(lang: str | None = None) -> str:
    """The language of the checks' feedback texts, set to ``lang`` when given ("en" or "ko"); returns
    the language in force.  The default is ``$LABSUPPORT_LANG`` when it names one, else English."""
    if lang is not None:
        if lang not in LANGUAGES:
            raise ValueError(f"no feedback texts in {lang!r}: choose one of {', '.join(LANGUAGES)}")
        _LANGUAGE[0] = lang
    return _LANGUAGE[0]


@functools.lru_cache(maxsize=None)
def catalog(lang: str) -> Mapping[str, str]:
    """English template → its translation, from ``texts/<lang>.po`` (entries untranslated or marked
    fuzzy are left out: their English shows)."""
    import polib  # noqa: PLC0415 - only when a translation is asked for

    path = TEXT_DIR / f"{lang}.po"
    if not path.is_file():
        return {}
    entries = polib.pofile(str(path))
    return {e.msgid: e.msgstr for e in entries if e.msgstr and not e.obsolete and "fuzzy" not in e.flags}


def translate(text: Any) -> Any:
    """``text`` in the language in force (itself when it is no string or has no translation)."""
    if _LANGUAGE[0] == "en" or not isinstance(text, str):
        return text
    return catalog(_LANGUAGE[0]).get(text, text)


def text_leaves(chapter: str) -> list[tuple[str, str]]:
    """(where, text) of every text in ``texts/<chapter>.toml`` a learner reads, in the file's order
    (``"q1.tie_not_first.symptom"``, ``"q1.hint[0]"``, ``"q4.mean_of_means.symptom.then"``)."""
    with open(TEXT_DIR / f"{chapter}.toml", "rb") as handle:
        data = tomllib.load(handle)
    out: list[tuple[str, str]] = []

    def walk(where: str, value: Any) -> None:
        if isinstance(value, str):
            out.append((where, value))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(f"{where}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key != "if":                    # a text table's fact key, not a text
                    walk(f"{where}.{key}" if where else key, item)

    walk("", data)
    return out


@dataclass(frozen=True)
class Choice:
    """A text that depends on one fact: ``then`` when ``facts[key]`` is true, else ``otherwise``."""

    key: str
    then: str
    otherwise: str

    def __call__(self, facts: Mapping[str, Any]) -> str:
        return translate(self.then if facts[self.key] else self.otherwise).format_map(facts)


def _text(where: str, value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) != {"if", "then", "else"}:
            raise ValueError(f"{where}: a text table has exactly the keys if, then, else")
        return Choice(value["if"], value["then"], value["else"])
    return value


@dataclass(frozen=True)
class QuestionTexts:
    """One question's texts: its hint tiers, its default formula, each rule's feedback, its
    other messages (the ``[qN.messages]`` table, no rule) and its option lists (``[qN.options]``)."""

    question: str
    hint: Any = ""
    formula: str | None = None
    rules: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def say(self, key: str, /, **facts: Any) -> str:
        """The message ``key`` of this question, filled from ``facts`` (a ``str.format`` template; a
        fact may itself be called ``key``)."""
        return translate(self.messages[key]).format_map(facts)


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
            if not isinstance(value, dict) or name in NOT_RULES:
                continue
            where = f"{chapter}.toml [{question}.{name}]"
            unknown = set(value) - set(FIELDS)
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
            rules[name] = {f: _text(f"{where} {f}", text) for f, text in value.items()}
        texts[question] = QuestionTexts(question, tuple(hint) if isinstance(hint, list) else hint,
                                        entry.get("formula"), rules, entry.get("messages", {}),
                                        entry.get("options", {}))
    return texts
