"""The doctor's progress lines on stderr fit 100 columns like every text report: a stage whose
message runs long (the bench's keep-alive note, a roofline skipped with its reason) is wrapped
with its continuation indented under the message, nothing of it lost."""

from pathlib import Path

from infergap.cli.doctor import stage_lines

ROOT = Path(__file__).resolve().parents[2]
#: stderr of `infergap doctor` against a real llama-server on an H200 (tests/fixtures/real-gpu)
CAPTURED = ROOT / "tests" / "fixtures" / "real-gpu" / "h200-llama-process" / "q8" / "doctor.err"


def _stages() -> list[tuple[str, str]]:
    out = []
    for line in CAPTURED.read_text().splitlines():
        stage, sep, msg = line.partition(": ")
        if sep and stage in {"server", "process", "audit", "roofline", "bench", "plan"}:
            out.append((stage, msg))
    return out


def test_captured_stage_lines_fit_100_columns_and_keep_every_word():
    stages = _stages()
    assert any(len(f"{s}: {m}") > 100 for s, m in stages), "the capture holds a long stage line"
    for stage, msg in stages:
        lines = stage_lines(stage, msg)
        assert lines[0].startswith(f"{stage}: ")
        assert all(len(x) <= 100 for x in lines), lines
        assert all(x.startswith(" " * (len(stage) + 2)) for x in lines[1:]), lines
        assert " ".join(x.strip() for x in lines).split() == f"{stage}: {msg}".split()


def test_roofline_skipped_reason_wraps_under_the_message():
    msg = ("skipped (--gpu auto: no NVIDIA GPU found in this host (no GPU in sysfs, nvidia-smi or NVML); "
           "name one with --gpu)")
    lines = stage_lines("roofline", msg)
    assert len(lines) == 2 and lines[1].startswith("          ") and lines[1].strip().endswith("name one with --gpu)")
