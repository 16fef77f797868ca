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
        texts = [*hints, entry.formula or ""]
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


def test_messages_and_options_are_no_rules(tmp_path, monkeypatch):
    """``[qN.messages]`` (other texts, filled by ``say``) and ``[qN.options.part]`` (an option list, in the
    file's order) load beside the rules and are never taken for one."""
    (tmp_path / "chXX.toml").write_text('[q1.r]\nsymptom = "s"\nask = "?"\nfix = "!"\n'
                                        '[q1.messages]\nwrong = "{call}: {key!r} for {got}"\n'
                                        '[q1.options.b]\nzz = "last in name, first in file"\naa = "second"\n',
                                        encoding="utf-8")
    monkeypatch.setattr(T, "TEXT_DIR", tmp_path)
    T.load_texts.cache_clear()
    try:
        texts = T.load_texts("chXX")["q1"]
        assert set(texts.rules) == {"r"} and list(texts.options["b"]) == ["zz", "aa"]
        assert texts.say("wrong", call="f(1)", key="a", got=2) == "f(1): 'a' for 2"
        assert list(Rules(Rule("r"), texts=texts)) == ["r"]
    finally:
        T.load_texts.cache_clear()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_message_template_is_well_formed(chapter):
    for entry in T.load_texts(chapter).values():
        for text in entry.messages.values():
            list(string.Formatter().parse(text))


def test_every_sealed_key_is_loaded_by_its_chapter_and_every_load_finds_one():
    """The answer keys live in sealed.toml under their salt: each is a list of SHA-256 digests that some check
    module loads, and the sandbox's copy holds no such file (tests/grading/test_grader_pieces.py)."""
    import re
    from pathlib import Path

    from labsupport.check import _core

    keys = _core._sealed_file()
    folder = Path(_core.__file__).parent
    used = set()
    for path in sorted(folder.glob("ch*.py")):
        source = path.read_text(encoding="utf-8")
        used |= set(re.findall(r'Sealed\.load\("([^"]+)"\)', source))
        used |= {f"labsupport:ch03:q4:{p}" for p in "abc"} if 'f"labsupport:ch03:q4:{part}"' in source else set()
        used |= ({f"labsupport:ch04:q4:{p}" for p in ("a", "c", "c_reset")}
                 if 'f"labsupport:ch04:q4:{part}"' in source else set())
        assert "Sealed(" not in source.replace("Sealed.load(", ""), f"{path.name}: a key pasted in the module"
    assert used == set(keys), sorted(used ^ set(keys))
    for salt, digests in keys.items():
        assert salt.startswith("labsupport:ch") and digests and all(re.fullmatch(r"[0-9a-f]{64}", d) for d in digests)
    fix = _core.Sealed.load("labsupport:ch06:q3:fix")
    assert "a" not in fix and len(fix) == 7
