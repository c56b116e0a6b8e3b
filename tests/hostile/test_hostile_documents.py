"""Hostile documents given to ``plan`` and ``compare``: nesting, wrong field types, NaN, files
that are not documents. Each is one line naming the file and the field."""

from __future__ import annotations

import json

import pytest
from hostile_helpers import cli, one_line_error

from tests.conftest import HOSTS


@pytest.fixture(scope="module")
def audit_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs") / "audit.json"
    p = cli("audit", "--snapshot", str(HOSTS / "h200-1gpu"), "--format", "json", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def roofline_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs") / "roofline.json"
    p = cli("roofline", "--model", "llama-3.1-8b", "--gpu", "h200", "--gpus", "1", "--format", "json", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_audit_with_a_wrong_field_type(tmp_path, audit_doc):
    bad = json.loads(json.dumps(audit_doc))
    bad["findings"][0]["status"] = {"nested": True}
    line = one_line_error(cli("plan", "--audit", str(_write(tmp_path, "a.json", bad))), "a.json", "findings[0].status")
    assert len(line) < 400


def test_roofline_document_is_validated(tmp_path, roofline_doc):
    bad = json.loads(json.dumps(roofline_doc))
    bad["hardware"] = "an H200, trust me"
    one_line_error(cli("plan", "--roofline", str(_write(tmp_path, "r.json", bad))), "r.json", "hardware")


@pytest.mark.parametrize("opt", ["--audit", "--roofline", "--bench"])
def test_deeply_nested_documents(tmp_path, opt):
    one_line_error(cli("plan", opt, str(_write(tmp_path, "deep.json", "[" * 200_000 + "]" * 200_000))), "deep.json")


def test_nan_in_a_document_is_refused(tmp_path, audit_doc):
    text = json.dumps(audit_doc).replace('"duration_s": ', '"duration_s": NaN, "x": ', 1)
    one_line_error(cli("plan", "--audit", str(_write(tmp_path, "nan.json", text))), "nan.json", "NaN")


def test_a_device_is_not_a_document(tmp_path):
    one_line_error(cli("plan", "--audit", "/dev/zero"), "/dev/zero")


def test_plan_output_over_its_input_is_refused(tmp_path, audit_doc):
    a = _write(tmp_path, "a.json", audit_doc)
    before = a.read_text()
    one_line_error(cli("plan", "--audit", str(a), "-o", str(a)), "refusing to overwrite")
    assert a.read_text() == before


def test_plan_json_never_holds_bare_nan(tmp_path, audit_doc):
    out = tmp_path / "plan.json"
    p = cli("plan", "--audit", str(_write(tmp_path, "a.json", audit_doc)), "--format", "json", "-o", str(out))
    assert p.returncode == 0, p.stderr
    json.loads(out.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
