"""Named mistakes as data: the rule engine every chapter's check module uses (chapters 0–6).

A :class:`Rule` is one wrong answer a check recognises by name: the wrong implementation a learner
may have written (``wrong``, same signature as the reference; optional), and the feedback in tiers —
the ``symptom`` (always shown: what the learner's result shows, on the smallest input that shows
it), the ``ask`` (a question, on the first time), the ``fix`` (on a repeat), the ``formula`` (from
the third time on).  Texts are ``str.format`` templates over the *facts* of the failing case (the
call, the numbers that explain it), or callables ``facts -> str`` where a text needs logic; the
tiers are counted per mistake by :mod:`labsupport.check._core`.

A chapter module then holds three things per question: input generators, the reference, and a
table of rules (:class:`Rules`).  Two helpers find the input a mistake is shown on:

* :func:`smallest` — the first of the hand-picked cases (smallest first) where the rule's wrong
  implementation differs from the reference and the learner's function gives the wrong answer;
* :func:`first_showing` — the first case a classifier names the same mistake on (for mistakes
  recognised by what the result *is*, e.g. a float where an int belongs, rather than by a wrong
  implementation).

:func:`in_words` writes a list of dataset or rank numbers into a fact ("0, 2 and 3"), :func:`call_text` a call,
:func:`choices` what a multiple-choice answer chose wrongly and how many right options it misses;
:func:`by_kind` draws generated cases with a quota per kind of case, smallest first.

:func:`diagnose` ties them together for a question whose rules all have wrong implementations: it
raises the first rule's :class:`~labsupport.check._core.Mistake` that the learner's function
follows, rendered with the facts of that smallest case.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, NoReturn, Sequence

from labsupport.check._core import Mistake
from labsupport.check.texts import QuestionTexts, translate

Case = tuple
Same = Callable[[Any, Any], bool]


def _render(text: Any, facts: Mapping[str, Any]) -> str:
    if callable(text):
        return str(text(facts))
    text = translate(text)
    return str(text).format_map(facts) if facts else str(text)


@dataclass(frozen=True)
class Rule:
    """One named mistake: its wrong implementation (optional) and its feedback tiers.

    The texts usually come from the chapter's text file (:mod:`labsupport.check.texts`): a
    :class:`Rules` table given ``texts=`` fills every text a rule leaves empty.
    ``symptom``, ``ask``, ``fix`` and ``formula`` are templates (``"{call} returned {got}"``) filled
    from the facts of the failing case, or callables taking those facts.  Literal braces in a
    template are doubled (``{{``), as in ``str.format``.  ``confirm`` asks :func:`smallest` for
    that many further cases that follow the rule before it is named (for rules a right answer
    could match by chance on one input).
    """

    name: str
    symptom: Any = ""
    ask: Any = ""
    fix: Any = ""
    formula: Any = ""
    wrong: Callable[..., Any] | None = None
    confirm: int = 0

    def mistake(self, **facts: Any) -> Mistake:
        """The :class:`Mistake` this rule names, its texts filled from ``facts``."""
        return Mistake(self.name, _render(self.symptom, facts), _render(self.ask, facts),
                       _render(self.fix, facts), _render(self.formula, facts))

    def fail(self, **facts: Any) -> NoReturn:
        """Fail the running check with this mistake."""
        raise self.mistake(**facts)

    def but(self, **changes: Any) -> "Rule":
        """This rule with some fields replaced (a chapter's variant of a shared mistake)."""
        return Rule(**{**self.__dict__, **changes})


class Rules(Mapping[str, Rule]):
    """A question's table of rules, by name, in the order they are tried.

    ``texts`` (a question's :class:`~labsupport.check.texts.QuestionTexts`) fills each text a rule
    leaves empty from the rule's entry, and ``formula`` (or the texts' formula) every formula still
    empty.  A text entry for a rule the table does not have, or a rule left without a symptom, ask
    or fix, is an error when the module is imported."""

    def __init__(self, *rules: Rule, formula: Any = None, texts: QuestionTexts | None = None):
        if texts is not None:
            unknown = set(texts.rules) - {r.name for r in rules}
            if unknown:
                raise ValueError(f"texts of {texts.question} for rules it does not have: {sorted(unknown)}")
            rules = tuple(r.but(**{f: v for f, v in texts.rules.get(r.name, {}).items() if not getattr(r, f)})
                          for r in rules)
            formula = texts.formula if formula is None else formula
        if formula is not None:   # one formula for every rule that has none of its own
            rules = tuple(r if r.formula else r.but(formula=formula) for r in rules)
        self._rules = {r.name: r for r in rules}
        if len(self._rules) != len(rules):
            raise ValueError("two rules of one table share a name")
        empty = [r.name for r in rules if not (r.symptom and r.ask and r.fix)]
        if empty:
            raise ValueError(f"rules without a symptom, ask or fix: {empty}")

    def __getitem__(self, name: str) -> Rule:
        return self._rules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def fail(self, name: str, **facts: Any) -> NoReturn:
        """Fail with the rule called ``name``, filled from ``facts``."""
        self._rules[name].fail(**facts)


def smallest(learner: Callable, cases: Iterable[Case], right: Callable, wrong: Callable, same: Same,
             tries: int = 6, confirm: int = 0) -> tuple[Case, Any] | None:
    """The first of ``cases`` (smallest first) where ``wrong`` and ``right`` differ and the learner's
    function gives ``wrong``'s answer: ``(case, learner's result)``, the smallest input that shows
    the mistake — after at most ``tries`` calls of the learner's function.  With ``confirm``, the
    learner must give ``wrong``'s answer on that many further such cases, and on none of them
    another answer (else ``None``: the learner follows another rule); running out of cases after the
    first match counts as confirmed.  A case on which the
    learner's code raises is skipped; each call gets a deep copy of the case."""
    found = None
    for args in cases:
        if tries <= 0:
            break
        bad = wrong(*args)
        if same(bad, right(*args)):
            continue
        tries -= 1
        try:
            got = learner(*copy.deepcopy(args))
        except Exception:  # noqa: BLE001 - the learner's code on an input the check chose
            continue
        if not same(got, bad):
            if found is not None:
                return None                   # it does not follow that rule after all
            continue
        if found is None:
            found = args, got
        if confirm <= 0:
            return found
        confirm -= 1
    return None if confirm > 0 else found


def first_showing(run: Callable[[Case], Any], cases: Iterable[Case], kind_of: Callable[[Case, Any], Any],
                  kind: Any) -> tuple[Case, Any] | None:
    """The first of ``cases`` on which ``kind_of(case, run(case))`` names ``kind``:
    ``(case, run(case))``, or ``None``.  A case on which ``run`` raises is skipped."""
    for case in cases:
        try:
            got = run(case)
        except Exception:  # noqa: BLE001 - the learner's code fails on this small case: try the next
            continue
        if kind_of(case, got) == kind:
            return case, got
    return None


def diagnose(learner: Callable, rules: Rules, cases: Sequence[Case] | Callable[[Rule], Iterable[Case]],
             right: Callable, same: Same, facts: Callable[[Case, Any], Mapping[str, Any]],
             tries: int = 6) -> None:
    """Raise the first rule's mistake (in table order) that the learner's function follows on a small
    case, rendered with ``facts(case, got)``; return ``None`` when it follows none of them.

    ``cases`` is one list for every rule, or a function giving each rule its own (smallest first).
    Rules without a wrong implementation are passed over: they are named by the check's own logic.
    """
    for rule in rules.values():
        if rule.wrong is None:
            continue
        candidates = cases(rule) if callable(cases) else cases
        found = smallest(learner, candidates, right, rule.wrong, same, tries=tries, confirm=rule.confirm)
        if found is not None:
            case, got = found
            rule.fail(**facts(case, got))
    return None


def explain(learner: Callable, rules: Iterable[Rule], case: Case, got: Any, right: Callable, same: Same,
            cases: Callable[[Rule], Iterable[Case]], facts: Callable[[Case, Any], Mapping[str, Any]],
            variants: Mapping[str, Sequence[Callable]] | None = None) -> None:
    """Fail with the first of ``rules`` whose wrong implementation — or one of its ``variants[rule.name]``
    (other forms of the same mistake) — gives the learner's ``got`` on the failing ``case``: shown on
    the smallest of ``cases(rule)`` where the learner follows it too (:func:`smallest`), else on
    ``case`` itself.  Returns when no rule explains ``got`` (the check then fails plainly)."""
    for rule in rules:
        wrongs = [w for w in (rule.wrong, *(variants or {}).get(rule.name, ()))
                  if w is not None and same(got, w(*case)) and not same(got, right(*case))]
        if wrongs:
            shown = (smallest(learner, cases(rule), right, wrong, same) for wrong in wrongs)
            rule.fail(**facts(*next((found for found in shown if found), (case, got))))


def in_words(items: Iterable[Any], empty: str = "") -> str:
    """``[0, 2, 3]`` → ``"0, 2 and 3"`` (``[5]`` → ``"5"``; no items → ``empty``), for a fact."""
    items = [str(i) for i in items]
    if not items:
        return empty
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def choices(chosen: Iterable[str], right: Any) -> tuple[str, int]:
    """A multiple-choice part's feedback facts: the wrongly chosen options in words (``"'a' and 'b'"``, ``""`` when
    none) and how many right options are missing (``right``: the key, ``in`` and ``len`` — a sealed key too); it
    names only what the learner chose, so it gives away no option the learner did not pick."""
    chosen = set(chosen)
    wrong = sorted(c for c in chosen if c not in right)
    return in_words(repr(c) for c in wrong), len(right) - (len(chosen) - len(wrong))


def call_text(name: str, params: str, *values: Any) -> str:
    """The call ``name(param=value, …)`` as a message shows it (``params``: the names, space-separated)."""
    return f"{name}({', '.join(f'{p}={v}' for p, v in zip(params.split(), values, strict=True))})"


def by_kind(room: dict[str, int], draw: Callable[[], tuple[Any, Any, str]], key: Callable) -> list[tuple]:
    """Generated ``(case, want)`` pairs, a quota per kind: ``draw`` (which also names the case's kind) until each
    kind holds its ``room`` (a draw of a full kind is dropped), sorted by ``key``: smallest first, so that a failure
    shows the smallest input that shows it."""
    cases = []
    while any(room.values()):
        case, want, kind = draw()
        if room[kind]:
            room[kind] -= 1
            cases.append((case, want))
    return sorted(cases, key=key)
