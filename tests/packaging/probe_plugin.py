"""A setuptools plugin installed into a temp dir, and a project whose setup.py asks for it: what
the build hooks' view and the build cache are tested with."""

from __future__ import annotations

import shutil
from pathlib import Path

PLUGIN = "kfpspot-probe-plugin"
"""The plugin's distribution name."""


def install_plugin(site: Path, version: str = "1.0", *, record: bool = True) -> Path:
    """Install the plugin into ``site`` (made) at ``version``, replacing another version; returns
    ``site``. Its ``egg_info`` writer leaves ``probe.txt``, holding ``version``, in the metadata
    (as setuptools-scm writes a project's version). ``record``: with a ``RECORD``, as pip installs.
    """
    for old in site.glob("kfpspot_probe_plugin-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"kfpspot_probe_plugin-{version}.dist-info"
    info.mkdir(parents=True)
    (site / "kfpspot_probe.py").write_text(
        f"def write(cmd, basename, filename):\n    cmd.write_file('probe', filename, {version!r})\n"
    )
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[egg_info.writers]\nprobe.txt = kfpspot_probe:write\n")
    files = ["kfpspot_probe.py", *(f"{info.name}/{n}" for n in ("METADATA", "entry_points.txt"))]
    if record:
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/RECORD"]))
    return site


def legacy_project(root: Path, setup_py: str) -> Path:
    """A project at ``root`` (made) built by setuptools from ``setup_py``, declaring only it."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (root / "probed.py").write_text("VALUE = 1\n")
    (root / "setup.py").write_text(setup_py)
    return root
