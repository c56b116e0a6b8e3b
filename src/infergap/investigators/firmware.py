"""Firmware: BIOS vendor/version/date, system product, UEFI vs legacy boot.

Sources: ``/sys/class/dmi/id/*`` (Documentation/ABI/testing/sysfs-class-dmi), ``/sys/firmware/efi``.
BIOS settings themselves (ACS, IOMMU, NPS, ReBAR, C-states) are judged by their effects elsewhere.
"""

from __future__ import annotations

from infergap.findings import Finding, Status
from infergap.investigators.base import Context, evidence, finding, unknown

NAME = "firmware"
FIELDS = ("bios_vendor", "bios_version", "bios_date", "sys_vendor", "product_name")


def investigate(ctx: Context) -> list[Finding]:
    """firmware.info: what firmware the host runs (report only)."""
    vals = {k: ctx.facts.value(f"/sys/class/dmi/id/{k}") for k in FIELDS}
    efi = ctx.facts.value("/sys/firmware/efi/fw_platform_size")
    dmi = ctx.facts.cmd_ok("dmidecode")
    present = [v for v in vals.values() if v is not None]
    if not present and dmi is None:
        return [unknown("firmware.info", "Firmware: not captured", "Needs /sys/class/dmi/id (often hidden in VMs and containers) or dmidecode.")]
    boot = "UEFI" if efi is not None else "legacy BIOS or unknown"
    desc = " ".join(v.value for k, v in vals.items() if v is not None and k in ("sys_vendor", "product_name"))
    bios = " ".join(v.value for k, v in vals.items() if v is not None and k.startswith("bios_"))
    dmi_ev = (dmi.source, dmi.stdout.strip()[:400]) if dmi is not None and not present else None
    return [finding("firmware.info", Status.ok, f"Firmware: {desc or 'system'} — {bios or 'BIOS unknown'} ({boot})",
                    evidence_=evidence(*present, efi, dmi_ev), impact="Reported for the record; BIOS settings are judged by their effects (ACS, IOMMU, NUMA, ReBAR, C-states).",
                    details={k: (v.value if v else None) for k, v in vals.items()} | {"boot": boot})]
