"""parsers/dcgm.py: dcgmi diag tables from public reports, in both of dcgmi's layouts."""

from __future__ import annotations

from pathlib import Path

from infergap.parsers.dcgm import parse_dcgmi_diag

EV = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def _read(name: str):
    return parse_dcgmi_diag((EV / name).read_text(encoding="utf-8").splitlines())


def test_the_3x_layout_gives_each_gpu_its_result_and_joins_the_wrapped_messages() -> None:
    """go-dcgm#52: GPU Memory passes on GPU 1 and fails on GPU 0; the warning, wrapped inside
    words at the cell's width, reads as one sentence naming GPU 0."""
    d = _read("dcgmi-godcgm52-gpu0-memory-fail.txt")
    assert [(t.section, t.name, t.gpus) for t in d.tests] == [("Hardware", "GPU Memory", {"1": "Pass", "0": "Fail"})]
    assert [(t.name, g) for t, g in d.results("Fail")] == [("GPU Memory", "0")]
    warn = [n for n in d.notes if n.kind == "Warning"]
    assert len(warn) == 1 and warn[0].gpu == "0" and warn[0].test == "GPU Memory"
    assert "Reset GPU. Restart DCGM." in warn[0].text and "Unable to create CUDA context" in warn[0].text
    assert [n.gpu for n in d.notes if n.kind == "Info"] == ["0", "1"]


def test_the_4x_layout_reads_the_metadata_and_one_row_per_gpu() -> None:
    """DCGM#253 (DCGM 4.2.3): software passes on GPU0-3; the cut last row still reads."""
    d = _read("dcgmi-dcgm253-diag-4x-layout.txt")
    assert d.metadata["DCGM Version"] == "4.2.3" and d.metadata["Driver Version Detected"] == "570.148.08"
    assert [(t.section, t.name) for t in d.tests] == [("Deployment", "software"), ("Hardware", "memory")]
    assert d.tests[0].gpus == {"all": "Pass", "0": "Pass", "1": "Pass", "2": "Pass", "3": "Pass"}
    assert not d.results("Fail") and not d.notes


def test_text_that_is_no_table_yields_nothing() -> None:
    d = parse_dcgmi_diag(["Successfully ran diagnostic for group.", "| not | a result |", "+----+", "|x"])
    assert not d.tests and not d.notes and not d.metadata
