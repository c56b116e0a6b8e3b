"""The seed case end to end: seed host audit + SGLang TP8 log + GLM-5-NVFP4 roofline + the seed's
bench figures → the plan the seed campaign reached by hand, item by item from the evidence."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from plan_support import ROOT, SEED_LOG
from infergap.plan import SCHEMA, build_plan


@pytest.fixture(scope="module")
def seed_plan(seed_inputs):
    audit, logs, rl, bench = seed_inputs
    return build_plan(audit=audit, roofline=rl, bench=bench, engine_logs=logs)


def test_gap_first_three_point_four_percent_of_aggregate(seed_plan):
    agg = next(h for h in seed_plan.gap.headline if h["bound"] == "aggregate")
    assert agg["measured_tok_s"] == pytest.approx(10.36)
    assert 0.032 <= agg["ratio"] <= 0.036  # the seed's "3.4 %" of a ~300 tok/s aggregate bound
    tight = seed_plan.gap.headline[-1]
    assert tight["bound"] == "per_gpu" and tight["ratio"] > agg["ratio"]
    assert "collectives" in seed_plan.gap.binds
    cs = [p.concurrency for p in seed_plan.gap.points]
    assert cs == [1, 10, 2048]
    p10 = seed_plan.gap.points[1]
    assert p10.bound == "batched" and p10.binds == "memory" and 0 < p10.ratio < 1


def test_host_fixes_runtime_first_worst_first(seed_plan):
    kinds = [h.fix_kind for h in seed_plan.host_fixes]
    # nothing in the seed capture shows inter-node traffic over its RDMA NIC: nvidia_peermem is P1, not P0
    assert kinds[0] == "runtime" and seed_plan.host_fixes[0].severity == "P1"
    assert next(h for h in seed_plan.host_fixes if h.id == "nvidia.peermem").severity == "P1"
    first_other = next(i for i, k in enumerate(kinds) if k != "runtime")
    assert all(k != "runtime" for k in kinds[first_other:])
    mrr = next(h for h in seed_plan.host_fixes if h.id == "pcie.max_read_request")
    assert len(mrr.subjects) == 8 and mrr.revert


def test_flag_flips_pcie_allreduce_cuda_graph_mtp(seed_plan):
    ff = {x.id: x for x in seed_plan.tier("flag_flip")}
    ar = ff["allreduce.pcie_ipc"]
    assert any("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1" in a for a in ar.actions)
    assert any("0.5.9" in a and "upgrad" in a for a in ar.actions)  # the log's version predates the variable
    assert {"gpu.nvlink", "par.tp", "engine.name"} <= set(ar.facts)
    assert any("nvlink.topology" in s for s in ar.selected_by)
    g = ff["cuda_graph.raise_max_bs"]
    assert any("--cuda-graph-max-bs 2048" in a for a in g.actions)  # 0.5.9 predates --cuda-graph-max-bs-decode
    assert "server.cuda_graph" in g.facts and ({"log.decode_no_graph", "load.graph_overflow"} & set(g.facts))
    mtp = ff["spec.mtp"]
    assert {"model.mtp", "server.spec", "regime.latency_bound"} <= set(mtp.facts)
    assert any("--speculative-algorithm" in a for a in mtp.actions)
    assert "parallel.dp_replicas" not in ff  # 441 GB of weights do not fit two 96 GB GPUs
    assert seed_plan.tier("engineering"), "an engineering tier"
    assert "eng.pcie_allreduce_kernel" in {x.id for x in seed_plan.tier("engineering")}
    for x in seed_plan.levers:
        assert x.verify.startswith("infergap bench --url ") and x.undo and x.risk and x.source


def test_wont_help_custom_allreduce_and_flashinfer_fusion_on_sm120(seed_plan):
    wh = {x.id: x for x in seed_plan.wont_help}
    assert "no.reenable_custom_allreduce" in wh and "no.flashinfer_ar_fusion_sm120" in wh
    assert "gpu.sm" in wh["no.flashinfer_ar_fusion_sm120"].facts
    assert all(x.why for x in wh.values())


def test_every_item_names_its_facts_and_loses_them(seed_plan):
    """Every selected item names the facts that selected it; without those facts it is gone."""
    for x in seed_plan.levers + seed_plan.wont_help:
        assert x.facts and x.selected_by and all(any(f in s for s in x.selected_by) for f in x.facts)
        facts = {k: v for k, v in seed_plan.facts.items() if k not in x.facts}
        again = build_plan(facts=facts)
        assert x.id not in {y.id for y in again.levers + again.wont_help}, x.id


def test_removing_nvlink_fact_moves_pcie_allreduce_to_unknown(seed_plan):
    facts = dict(seed_plan.facts)
    del facts["gpu.nvlink"]
    again = build_plan(facts=facts)
    assert "allreduce.pcie_ipc" not in {x.id for x in again.levers}
    u = next(u for u in again.unknowns if u.fact == "gpu.nvlink")
    assert "allreduce.pcie_ipc" in u.decides and "infergap audit" in u.command


def test_json_schema_and_cli(seed_inputs, tmp_path):
    audit, logs, rl, bench = seed_inputs
    a, r, b = tmp_path / "audit.json", tmp_path / "roofline.json", tmp_path / "bench.json"
    a.write_text(json.dumps(audit.to_json()))
    r.write_text(json.dumps(rl.to_json_dict()))
    b.write_text(bench.to_json())
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="120")
    cmd = [sys.executable, "-m", "infergap", "plan", "--audit", str(a), "--roofline", str(r), "--bench", str(b), "--evidence", str(SEED_LOG)]
    out = subprocess.run(cmd + ["--format", "json"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["schema"] == SCHEMA
    assert {"stages", "facts", "gap", "host_fixes", "levers", "wont_help", "unknowns", "top_actions", "ranking"} <= set(d)
    assert any(x["id"] == "allreduce.pcie_ipc" for x in d["levers"])
    txt = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert txt.returncode == 0, txt.stderr
    order = [txt.stdout.index(s) for s in ("EFFICIENCY GAP", "HOST FIXES", "FLAG FLIPS", "SMALL CHANGES", "ENGINEERING", "WILL NOT HELP", "UNKNOWN")]
    assert order == sorted(order)
    md = subprocess.run(cmd + ["--format", "md"], capture_output=True, text=True, timeout=120, env=env)
    assert md.returncode == 0 and "## Will not help" in md.stdout
    bad = subprocess.run([sys.executable, "-m", "infergap", "plan", "--audit", str(r)], capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("infergap: error: --audit") and "Traceback" not in bad.stderr


def test_seed_html_report_has_every_section_and_the_gpu_plot(seed_inputs, seed_plan, tmp_path):
    from infergap.render.report import render_html, render_report_markdown

    audit, _, rl, bench = seed_inputs
    html = render_html(seed_plan, audit=audit, roofline=rl, bench=bench)
    for fig in ("plot-throughput", "plot-latency", "plot-gpu"):
        assert f'id="{fig}"' in html, fig
    assert "3.5%" in html and "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in html and "FlashInfer all-reduce + RMSNorm fusion" in html
    assert html.count("<details") >= len(audit.findings)  # the raw evidence of every finding, collapsible
    (tmp_path / "seed.html").write_text(html)
    md = render_report_markdown(seed_plan, audit, rl, bench)
    assert md.index("## Efficiency gap") < md.index("## Will not help")


def test_plan_text_speaks_the_users_words(seed_inputs, tmp_path):
    """Unknowns led with a check id ('engine.name — decides allreduce.pcie_ipc, …'), the gain
    with 'score 0.04/h' and a source with 'the seed campaign': each unknown is now a question in
    words with the id as a bracketed reference, what it would decide by the levers' titles, the
    effort in hours of work; the JSON keeps the ids."""
    from infergap.plan.catalog import load_catalog
    from infergap.plan.signals import FACT_WORDS

    audit, logs, rl, bench = seed_inputs
    a, r, b = tmp_path / "audit.json", tmp_path / "roofline.json", tmp_path / "bench.json"
    a.write_text(json.dumps(audit.to_json()))
    r.write_text(json.dumps(rl.to_json_dict()))
    b.write_text(bench.to_json())
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    full = ["--audit", str(a), "--roofline", str(r), "--bench", str(b), "--evidence", str(SEED_LOG)]
    for args in (full, ["--audit", str(a)]):
        for fmt in ("text", "md"):
            out = subprocess.run([sys.executable, "-m", "infergap", "plan", *args, "-f", fmt],
                                 capture_output=True, text=True, timeout=120, env=env)
            assert out.returncode == 0, out.stderr
            low = out.stdout.lower()
            assert "score" not in low and "/h)" not in low and "seed campaign" not in low and "the seed's" not in low and " decides " not in low, fmt
            if args is full:
                assert "h of work to try" in out.stdout
            elif fmt == "text":
                joined = re.sub(r"\n {4}(?=\S)", " ", out.stdout)  # a bullet's continuation lines (fitted to 100 columns)
                bullets = [x for x in joined[joined.index("UNKNOWN ("):].splitlines() if x.startswith("  • ")]
                assert bullets and all(x[4].isupper() and x.endswith("]") for x in bullets), bullets
                assert any(x.startswith("  • Which serving engine runs") and x.endswith("[engine.name]") for x in bullets)
    d = json.loads(subprocess.run([sys.executable, "-m", "infergap", "plan", "--audit", str(a), "-f", "json"],
                                  capture_output=True, text=True, timeout=120, env=env).stdout)
    u = d["unknowns"][0]
    assert u["question"] == FACT_WORDS[u["fact"]] and len(u["decides_titles"]) == len(u["decides"]) > 0
    used = {c["fact"] for lv in load_catalog() for c in _conditions(lv.when)}
    assert used <= set(FACT_WORDS), sorted(used - set(FACT_WORDS))


def _conditions(cond):
    """Every {fact: …} leaf of a lever's condition tree."""
    if isinstance(cond, dict):
        if "fact" in cond:
            return [cond]
        return [c for v in cond.values() for c in _conditions(v)]
    if isinstance(cond, list):
        return [c for x in cond for c in _conditions(x)]
    return []


def test_an_action_that_needs_an_upgrade_says_so_first(seed_plan):
    """The seed's SGLang 0.5.9 predates SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: the top action read
    '…: SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 after upgrading …' with the upgrade last; it now starts
    with the upgrade, and the top action's tag says the flip comes after one."""
    ar = next(x for x in seed_plan.levers if x.id == "allreduce.pcie_ipc")
    assert ar.actions[0].startswith("SGLang <0.5.21 (server reports 0.5.9): upgrade to SGLang >= 0.5.21 first, then "
                                    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"), ar.actions
    top = next(t for t in seed_plan.top_actions if ar.title in t)
    assert top.startswith("[flag flip after an upgrade] ") and top.index("upgrade to") < top.index("SGLANG_ENABLE")
    others = [t for t in seed_plan.top_actions if ar.title not in t]
    assert others and not any("after an upgrade" in t for t in others)
