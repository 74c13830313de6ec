"""docs/launcher.md states the floor's limits as the code has them."""

from __future__ import annotations

from pathlib import Path

from kfp_spot import vertex

LAUNCHER_DOC = Path(__file__).resolve().parents[2] / "docs" / "launcher.md"


def test_the_boot_disk_range_in_the_launcher_doc_is_the_floors():
    row = next(
        line for line in LAUNCHER_DOC.read_text().splitlines() if "`boot_disk_size_gb` |" in line
    )
    assert f"{vertex.MIN_BOOT_DISK_GB}-{vertex.MAX_BOOT_DISK_GB} GB" in row
    assert f"[{vertex.MIN_BOOT_DISK_GB}, {vertex.MAX_BOOT_DISK_GB}]" in row
