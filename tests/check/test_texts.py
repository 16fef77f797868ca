"""The feedback texts as data (labsupport/check/texts.py, labsupport/check/texts/chNN.toml)."""
from __future__ import annotations

import importlib
import string

import pytest

from labsupport.check import texts as T
from labsupport.check.rules import Rule, Rules

CHAPTERS = [f"ch0{n}" for n in range(7)]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_text_belongs_to_a_rule_and_every_rule_has_its_texts(chapter):
    module = importlib.import_module(f"labsupport.check.{chapter}")
    catalogue = T.load_texts(chapter)
    for question, entry in catalogue.items():
        assert set(entry.rules) <= set(module.RULES.get(question, {})), (chapter, question)
    for question, rules in module.RULES.items():
        for rule in rules.values():
            assert rule.symptom and rule.ask and rule.fix, (chapter, question, rule.name)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_templates_are_well_formed(chapter):
    """Every template parses as str.format (a stray brace would only show when a learner fails)."""
    for entry in T.load_texts(chapter).values():
        hints = entry.hint if isinstance(entry.hint, tuple) else (entry.hint,)
        texts = [*hints, entry.formula or "", *entry.messages.values()]
        for fields in entry.rules.values():
            for text in fields.values():
                texts += [text.then, text.otherwise] if isinstance(text, T.Choice) else [text]
        for text in texts:
            list(string.Formatter().parse(text))


def test_texts_fill_only_what_a_rule_leaves_empty():
    texts = T.QuestionTexts("q9", rules={"a": {"symptom": "S {x}", "ask": "A", "fix": "F"},
                                         "b": {"ask": "from the file", "fix": "F"}}, formula="X")
    rules = Rules(Rule("a"), Rule("b", symptom="code's {x}", ask="code's ask"), texts=texts)
    assert rules["a"].mistake(x=1).symptom == "S 1" and rules["a"].formula == "X"
    assert rules["b"].ask == "code's ask" and rules["b"].mistake(x=2).symptom == "code's 2"


def test_a_text_for_an_unknown_rule_or_a_rule_without_texts_is_refused():
    with pytest.raises(ValueError, match="does not have"):
        Rules(Rule("a", "s", "a", "f"), texts=T.QuestionTexts("q9", rules={"zz": {"ask": "?"}}))
    with pytest.raises(ValueError, match="without a symptom"):
        Rules(Rule("a", "s"))


def test_a_choice_picks_its_text_by_a_fact(tmp_path, monkeypatch):
    (tmp_path / "chXX.toml").write_text('[q1.r]\nask = "?"\nfix = "!"\n[q1.r.symptom]\nif = "small"\n'
                                        'then = "small {n}"\nelse = "big {n}"\n', encoding="utf-8")
    monkeypatch.setattr(T, "TEXT_DIR", tmp_path)
    T.load_texts.cache_clear()
    try:
        rule = Rules(Rule("r"), texts=T.load_texts("chXX")["q1"])["r"]
        assert rule.mistake(small=True, n=1).symptom == "small 1"
        assert rule.mistake(small=False, n=2).symptom == "big 2"
        (tmp_path / "chXX.toml").write_text('[q1.r]\nwhy = "?"\n', encoding="utf-8")
        T.load_texts.cache_clear()
        with pytest.raises(ValueError, match="unknown field"):
            T.load_texts("chXX")
    finally:
        T.load_texts.cache_clear()


def test_messages_and_options_are_texts_of_no_rule(tmp_path, monkeypatch):
    """``[qN.messages]`` (templates the check fills) and ``[qN.options.NAME]`` (key → text, in file order) are
    loaded apart from the rules: a Rules table never sees them, and anything but a table of texts is refused."""
    (tmp_path / "chXX.toml").write_text('[q1.r]\nsymptom = "s"\nask = "?"\nfix = "!"\n'
                                        '[q1.messages]\nwrong = "{call} returned {got}"\n'
                                        '[q1.options.pick]\nzeta = "last letter"\nalpha = "first letter"\n',
                                        encoding="utf-8")
    monkeypatch.setattr(T, "TEXT_DIR", tmp_path)
    T.load_texts.cache_clear()
    try:
        q1 = T.load_texts("chXX")["q1"]
        assert set(q1.rules) == {"r"} and list(Rules(Rule("r"), texts=q1)) == ["r"]
        assert q1.messages["wrong"].format(call="f(1)", got=2) == "f(1) returned 2"
        assert list(q1.options["pick"].items()) == [("zeta", "last letter"), ("alpha", "first letter")]
        assert type(q1.options["pick"]) is dict      # a plain dict: a check module may publish it as is
        for bad in ('[q1.messages]\nwrong = 3\n', '[q1]\noptions = "x"\n', '[q1.options]\npick = "x"\n'):
            (tmp_path / "chXX.toml").write_text(bad, encoding="utf-8")
            T.load_texts.cache_clear()
            with pytest.raises(ValueError, match="must"):
                T.load_texts("chXX")
    finally:
        T.load_texts.cache_clear()
