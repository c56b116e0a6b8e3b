"""PCI parsers on real inputs: the H200's configuration space as the capture stored it
(``od -An -tx1 -v``) and an ``lspci`` paste of PLX switches (pytorch/pytorch#1637 thread, see
tests/fixtures/evidence/ABOUT.md)."""

from __future__ import annotations

from infergap.parsers.pci import decode_config, lspci_parents, parse_lspci_vvv, parse_od_hex
from tests.parsers.inputs import EVIDENCE, h200

CONFIG = "files/sys/bus/pci/devices/0000:00:06.0/config.hex"


def test_config_hex_is_the_whole_extended_space():
    raw = parse_od_hex(h200(CONFIG))
    assert len(raw) == 4096 and raw[:4] == bytes.fromhex("de103523")


def test_h200_config_space_decodes():
    cs = decode_config(parse_od_hex(h200(CONFIG)))
    assert (cs.vendor, cs.device) == (0x10DE, 0x2335) and cs.extended_readable
    pcie = cs.pcie
    assert pcie is not None
    assert (pcie.mps_supported_B, pcie.mps_B, pcie.mrrs_B, pcie.rcb_B) == (256, 256, 4096, 64)
    assert (pcie.link_speed_max_GTs, pcie.link_width_max, pcie.link_speed_GTs, pcie.link_width) == (32.0, 16, 32.0, 16)


def test_lspci_paste_of_plx_switches():
    devs = parse_lspci_vvv((EVIDENCE / "lspci-torchipc17-plx.txt").read_text(encoding="utf-8"))
    assert len(devs) == 11 and "0000:02:00.0" in devs and "0000:88:08.0" in devs
    assert devs["0000:03:08.0"].description.startswith("PCI bridge: PLX Technology, Inc. PEX 8747")
    assert devs["0000:03:08.0"].bus == 0x03 and devs["0000:03:08.0"].domain == "0000"
    assert lspci_parents(devs) == {}  # no "Bus: primary=…" lines in a plain listing: nothing guessed
