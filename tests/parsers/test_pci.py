"""PCI parsers on real inputs: the H200's configuration space as the capture stored it
(``od -An -tx1 -v``) and an ``lspci`` paste of PLX switches (pytorch/pytorch#1637 thread, see
tests/fixtures/evidence/ABOUT.md)."""

from __future__ import annotations

from infergap.parsers.pci import decode_config, lspci_parents, parse_lspci_vvv, parse_od_hex, unaddressed_links
from tests.conftest import HOSTS
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


def test_link_lines_without_their_device_header():
    text = (EVIDENCE / "lspci-jan183-lnksta-downgraded.txt").read_text(encoding="utf-8")
    assert parse_lspci_vvv(text) == {}  # no device line: nothing to key a device by
    (d,) = unaddressed_links(text)
    assert (d.link_cap, d.link_sta) == ((16.0, 16), (2.5, 16))
    assert (d.speed_downgraded, d.width_downgraded, d.link_downgraded) == (True, False, True)


def test_lnksta_notes_of_newer_pciutils_in_a_device_block():
    # The seed host's lspci -vvv with one GPU's LnkSta line as newer pciutils print a downtrained link.
    seed = (HOSTS / "seed-8x-rtxpro6000" / "cmds" / "lspci_vvv.out").read_text(encoding="utf-8")
    plain = parse_lspci_vvv(seed)
    assert {(d.speed_downgraded, d.width_downgraded) for d in plain.values() if d.link_sta} == {(None, None)}  # no notes printed
    gpu = plain["0000:01:00.0"]
    assert gpu.link_sta == (32.0, 16)
    at = seed.index("LnkSta:\tSpeed 32GT/s, Width x16", seed.index("\n01:00.0 "))  # the GPU's own line
    noted = seed[:at] + "LnkSta:\tSpeed 2.5GT/s (downgraded), Width x8 (downgraded)" + seed[at + len("LnkSta:\tSpeed 32GT/s, Width x16"):]
    d = parse_lspci_vvv(noted)["0000:01:00.0"]
    assert d.link_sta == (2.5, 8) and (d.speed_downgraded, d.width_downgraded) == (True, True)
    assert unaddressed_links(noted) == []  # every LnkSta here belongs to the device above it


def test_width_note_without_the_capability_line():
    # geerlingguy/raspberry-pi-pcie-devices#480: a Quadro RTX 8000 in a Raspberry Pi's x1 slot, lines of its block.
    text = ("\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+\n"
            "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-\n"
            "\t\tLnkSta:\tSpeed 5GT/s (downgraded), Width x1 (downgraded)\n")
    (d,) = unaddressed_links(text)
    assert d.link_cap is None and d.link_sta == (5.0, 1) and (d.speed_downgraded, d.width_downgraded) == (True, True)
