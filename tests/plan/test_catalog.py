"""The lever catalog and its condition evaluator: the shipped file validates, every fact it names is
one the plan can gather, bad catalogs fail with one line, and evaluation is total (fuzzed)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infergap.errors import UserError
from infergap.plan import Fact, evaluate, load_catalog
from infergap.plan.catalog import EngineVariant
from infergap.plan.conditions import facts_in, version_key
from infergap.plan.signals import HOW_TO_FIND

PLAN_SRC = __import__("pathlib").Path(__file__).resolve().parents[2] / "src" / "infergap" / "plan"
#: The modules that gather facts: the inputs (signals.py), the sweep's shape (behaviour.py), the serving process.
FACT_SRCS = [PLAN_SRC / "signals.py", PLAN_SRC / "behaviour.py", PLAN_SRC / "process_facts.py"]


def test_shipped_catalog_complete():
    cat = load_catalog()
    tiers = {lv.tier for lv in cat}
    assert tiers == {"flag_flip", "small_change", "engineering", "wont_help"}
    gathered = {f for src in FACT_SRCS
                for f in re.findall(r'"((?:audit|gpu|engine|server|par|model|regime|load|log|proc)\.[a-z_0-9]+)"', src.read_text())}
    for lv in cat:
        assert lv.source and not lv.source.rstrip().endswith((",", ";", "(")), f"{lv.id}: source cut short (a YAML ' #' comment?)"
        for f in facts_in(lv.when):
            assert f.startswith("finding.") or f in gathered, f"{lv.id}: fact {f} is never gathered"
            assert any(f.startswith(p) for p in HOW_TO_FIND), f
        if lv.tier != "wont_help":
            assert lv.verify.startswith("infergap bench --url {url}"), lv.id


def test_flag_names_follow_the_server_version():
    lv = next(x for x in load_catalog() if x.id == "cuda_graph.raise_max_bs")
    pick = {v: [x.set for x in lv.engines["sglang"] if x.matches(v)] for v in ("0.5.9", "0.5.13", "0.5.15", "0.5.23")}
    assert pick["0.5.9"] == pick["0.5.13"] == ["--cuda-graph-max-bs {n}"]
    assert pick["0.5.15"] == pick["0.5.23"] == ["--cuda-graph-max-bs-decode {n}"]
    assert EngineVariant(versions=">=0.5.15,<0.5.21", set="x").matches("0.5.19")
    assert not EngineVariant(versions=">=0.5.15,<0.5.21", set="x").matches("0.5.21")


@pytest.mark.parametrize("text,msg", [
    ("levers: [", "not valid YAML"),
    ("other: 1", "top-level 'levers' list"),
    ("levers:\n- {id: a, title: t, tier: flag_flip, source: s}", "lever a: entry: Value error, missing gain"),
    ("levers:\n- {id: a, title: t, tier: wont_help, source: s, why: w, when: {fact: x, like: 1}}", "one operator"),
    ("levers:\n- {id: a, title: t, tier: wont_help, source: s, why: w}\n- {id: a, title: t, tier: wont_help, source: s, why: w}", "defined twice"),
])
def test_bad_catalog_one_line(tmp_path, text, msg):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        load_catalog(p)
    assert str(e.value).startswith(str(p)) and msg in str(e.value) and "\n" not in str(e.value)


def test_three_valued_logic():
    f = {"a": Fact(value=1, source="s"), "b": Fact(value=False, source="s")}
    assert evaluate({"all": [{"fact": "a", "eq": 1}, {"fact": "c", "eq": 1}]}, f).value is None
    assert evaluate({"all": [{"fact": "b", "eq": True}, {"fact": "c", "eq": 1}]}, f).value is False
    assert evaluate({"any": [{"fact": "a", "eq": 1}, {"fact": "c", "eq": 1}]}, f).value is True
    o = evaluate({"any": [{"fact": "b", "eq": True}, {"fact": "c", "eq": 1}]}, f)
    assert o.value is None and o.missing == ["c"]
    assert evaluate({"not": {"fact": "b", "eq": True}}, f).value is True
    assert evaluate({"fact": "a", "gt": "x"}, f).value is None  # incomparable types: unknown, not a crash


facts_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.builds(Fact, value=st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=6), st.lists(st.integers(0, 3), max_size=3)), source=st.just("s")))
atom_st = st.builds(lambda f, op, arg: {"fact": f, op: arg}, st.sampled_from(["a", "b", "c", "d", "e"]),
                    st.sampled_from(["eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "version_ge", "version_lt", "exists"]),
                    st.one_of(st.booleans(), st.integers(-5, 5), st.text(max_size=5), st.lists(st.integers(0, 3), max_size=3)))
cond_st = st.recursive(atom_st, lambda ch: st.one_of(st.builds(lambda x: {"all": x}, st.lists(ch, max_size=3)),
                                                     st.builds(lambda x: {"any": x}, st.lists(ch, max_size=3)),
                                                     st.builds(lambda x: {"not": x}, ch)), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(cond_st, facts_st)
def test_evaluate_is_total(cond, facts):
    o = evaluate(cond, facts)
    assert o.value in (True, False, None)
    if o.value is None:
        assert o.missing or any(f in facts for f in facts_in(cond))
    assert all(t.fact in facts or t.op == "exists" for t in o.used)


@given(st.text(max_size=20))
def test_version_key_total(text):
    k = version_key(text)
    assert isinstance(k, tuple) and k and all(isinstance(x, int) for x in k)
