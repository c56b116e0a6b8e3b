"""firmware investigator: firmware.info from /sys/class/dmi/id (the seed host's values) or dmidecode."""

from __future__ import annotations

from infergap.snapshot.core import CmdResult
from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_files, host_text, one

SEED = "seed-8x-rtxpro6000"
DMI = "/sys/class/dmi/id/"


def test_dmi_sysfs_is_ok_and_cites_each_field() -> None:
    f = one(audit_ids(MemorySnapshot(host_files(SEED, DMI)), "firmware"), "firmware.info")
    assert f.status == "ok"
    assert "Supermicro AS -4125GS-TNRT" in f.title and "1.7 03/15/2024" in f.title
    assert "legacy BIOS or unknown" in f.title  # no /sys/firmware/efi in this snapshot
    assert {e.source for e in f.evidence} >= {"files/sys/class/dmi/id/bios_version", "files/sys/class/dmi/id/product_name"}
    assert f.details["bios_vendor"] == "American Megatrends International, LLC."


def test_efi_platform_size_says_uefi() -> None:
    files = {**host_files(SEED, DMI), "/sys/firmware/efi/fw_platform_size": "64\n"}
    f = one(audit_ids(MemorySnapshot(files), "firmware"), "firmware.info")
    assert f.status == "ok" and f.title.endswith("(UEFI)") and f.details["boot"] == "UEFI"


def test_dmidecode_alone_is_ok_only_citing_its_output() -> None:
    # The seed host's own BIOS values in the layout dmidecode -t bios prints.
    dmi = host_files(SEED, DMI)
    out = (f"BIOS Information\n\tVendor: {dmi[DMI + 'bios_vendor'].strip()}\n\tVersion: {dmi[DMI + 'bios_version'].strip()}\n"
           f"\tRelease Date: {dmi[DMI + 'bios_date'].strip()}\n")
    f = one(audit_ids(MemorySnapshot({}, cmds={"dmidecode": out}), "firmware"), "firmware.info")
    assert f.status == "ok"
    assert [e.source for e in f.evidence] == ["cmds/dmidecode.out"] and "Release Date: 03/15/2024" in f.evidence[0].value


def test_nothing_or_a_failed_dmidecode_is_unknown() -> None:
    assert one(audit_ids(MemorySnapshot({}), "firmware"), "firmware.info").status == "unknown"
    failed = CmdResult(name="dmidecode", stdout="", stderr=host_text("h200-1gpu", "cmds/dmidecode.err"), rc=127)
    f = one(audit_ids(MemorySnapshot({}, cmds={"dmidecode": failed}), "firmware"), "firmware.info")
    assert f.status == "unknown" and "dmidecode" in (f.impact or "")
