"""Pasted forms of a real output: line numbers of ``cat -n`` in front of each line, and each line
quoted as Markdown inline code. Both are removed before the output is recognised and parsed, so
the paste audits as the plain copy does."""

from __future__ import annotations

from pathlib import Path

from infergap.evidence.recognize import scan_file
from tests.investigators.memsnap import audit_ids, evidence_text, one, pasted, pasted_text


def _numbered(text: str) -> str:
    """``text`` as ``cat -n`` prints it (``%6d\\t`` before every line)."""
    return "".join(f"{i:6d}\t{line}\n" for i, line in enumerate(text.splitlines(), 1))


def test_cat_n_numbers_before_a_p2p_matrix_are_removed(tmp_path: Path) -> None:
    """nccl#814's p2pBandwidthLatencyTest, numbered: the same part and the same gpu.p2p finding."""
    name = "nccl-814-p2p-slower.txt"
    plain = one(audit_ids(pasted(name), "interconnect"), "gpu.p2p")
    snap = pasted_text(tmp_path, "numbered.txt", _numbered(evidence_text(name)))
    got = one(audit_ids(snap, "interconnect"), "gpu.p2p")
    assert (got.status, got.title, [e.value for e in got.evidence]) == (plain.status, plain.title, [e.value for e in plain.evidence])
    parts, _ = scan_file(tmp_path / "numbered.txt")
    assert [p.kind for p in parts] == ["p2p_bandwidth"] and parts[0].numbered


def test_a_matrix_whose_rows_start_with_numbers_is_not_taken_for_line_numbers() -> None:
    parts, _ = scan_file(Path(__file__).parents[1] / "fixtures" / "evidence" / "nccl-814-p2p-slower.txt")
    assert parts and not any(p.numbered for p in parts)


def test_lines_quoted_as_inline_code_are_read(tmp_path: Path) -> None:
    """ollama#9181's offload lines, each wrapped in backticks: the same engine log facts."""
    name = "ollama-9181-partial-offload.log"
    quoted = "\n".join(f"`{ln}`" if ln.strip() and "`" not in ln else ln for ln in evidence_text(name).splitlines())
    plain = sorted((f.id, f.status, f.title) for fs in audit_ids(pasted(name), "engine_log").values() for f in fs)
    got = sorted((f.id, f.status, f.title) for fs in audit_ids(pasted_text(tmp_path, "q.log", quoted), "engine_log").values() for f in fs)
    assert got == plain and any(s.value == "actionable" for _, s, _ in got)


def test_llamacpp_offload_lines_without_their_prefix_are_read(tmp_path: Path) -> None:
    """llama.cpp#12171's offload lines with ``load_tensors: `` left out, as a paste quoting only
    the messages does: still a llama.cpp log, with the same offload."""
    text = "\n".join(ln.removeprefix("load_tensors: ") for ln in evidence_text("llamacpp-12171-offload-all.log").splitlines()
                     if "offload" in ln)
    snap = pasted_text(tmp_path, "offload.log", text)
    parts, _ = scan_file(tmp_path / "offload.log")
    assert [p.kind for p in parts] == ["llamacpp_log"]
    f = one(audit_ids(snap, "engine_log"), "engine.offload")
    assert f.status.value == "ok" and "49" in f.title


def test_output_behind_a_shell_comment_sign_is_read(tmp_path: Path) -> None:
    """A session annotated with ``# <what it printed>`` (the form of pytorch#52675): the output line
    behind ``#`` is the output, not a root prompt. faster-whisper#1278's real error, pasted that
    way after the command that printed it, gives the same finding as the plain paste; a root
    prompt (``# nvidia-smi topo -m``) still names the output under it."""
    from infergap.audit import run_audit

    def found(snap):
        try:
            return sorted((f.id, f.status.value, f.severity.value if f.severity else None, f.title)
                          for f in run_audit(snap).findings if f.id == "driver.cuda_compat")
        finally:
            snap.close()

    name = "fasterwhisper-1278-driver-old.txt"
    line = next(ln for ln in evidence_text(name).splitlines() if "insufficient" in ln)
    plain = found(pasted_text(tmp_path, "plain.txt", line + "\n"))
    got = found(pasted_text(tmp_path, "hash.txt", f"$ CUDA_VISIBLE_DEVICES=0 python transcribe.py\n# {line}\n"))
    assert got == plain and plain and plain[0][1] == "actionable"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("# nvidia-smi topo -m\n" + evidence_text("topo-667-pxb-pix.txt"), encoding="utf-8")
    assert [p.kind for p in scan_file(prompt)[0]] == ["nvsmi_topo"]
