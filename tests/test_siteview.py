"""Views of installed distributions (kfp_spot.siteview): the closure pip would install, and links
that expose exactly its files, a shared namespace directory included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kfp_spot import siteview


def _dist(site: Path, name: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> None:
    """Install distribution ``name`` 1.0 into ``site`` as pip would: its files and a RECORD."""
    info = f"{name.replace('-', '_')}-1.0.dist-info"
    metadata = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"}
    files[f"{info}/METADATA"] += metadata
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    record = [*files, f"{info}/RECORD"]
    (site / info / "RECORD").write_text("".join(f"{f},,\n" for f in record))


def _view(tmp_path: Path, site: Path, requirements: list[str]) -> tuple[Path, list[Path]]:
    needed = siteview.closure(requirements, siteview.Installed([str(site)]))
    assert not needed.missing and not needed.unreadable
    listed = [(d, siteview.recorded_files(d) or []) for d in needed.found.values()]
    view = tmp_path / "view"
    return view, siteview.link(view, listed)


def _imports(view: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(view)!r}); {code}"],
        capture_output=True,
        text=True,
    )


def test_a_shared_namespace_exposes_only_the_parts_of_the_views_distributions(tmp_path):
    site = tmp_path / "site"
    _dist(site, "ns-alpha", {"ns/alpha/__init__.py": "NAME = 'alpha'\n"})
    _dist(site, "ns-beta", {"ns/beta/__init__.py": "NAME = 'beta'\n"})
    _dist(site, "solo", {"solo/__init__.py": "", "solo/data.txt": "x"}, ("ns-alpha",))
    view, missing = _view(tmp_path, site, ["solo"])
    assert missing == []
    assert (view / "solo").is_symlink()  # a package wholly the view's: one link
    assert (view / "ns").is_dir() and not (view / "ns").is_symlink()
    assert sorted(os.listdir(view / "ns")) == ["alpha"]
    assert _imports(view, "import ns.alpha, solo").returncode == 0
    beta = _imports(view, "import ns.beta")
    assert "No module named 'ns.beta'" in beta.stderr
    # both parts in the view: the namespace is linked whole
    both, _ = _view(tmp_path / "both", site, ["ns-alpha", "ns-beta"])
    assert (both / "ns").is_symlink()


def test_a_file_no_record_lists_keeps_its_directory_out_of_the_view(tmp_path):
    site = tmp_path / "site"
    _dist(site, "pkg", {"pkg/__init__.py": "", "pkg/sub/__init__.py": ""})
    (site / "pkg" / "sub" / "stray.py").write_text("")  # written by something else
    (site / "pkg" / "__pycache__").mkdir()
    view, _ = _view(tmp_path, site, ["pkg"])
    assert not (view / "pkg").is_symlink()
    assert (view / "pkg" / "__pycache__").is_symlink()  # bytecode comes along
    assert sorted(os.listdir(view / "pkg" / "sub")) == ["__init__.py"]


def test_a_listed_file_that_is_not_installed_is_reported(tmp_path):
    site = tmp_path / "site"
    _dist(site, "pkg", {"pkg/__init__.py": "", "pkg/gone.py": "", "top.py": ""})
    (site / "pkg" / "gone.py").unlink()
    (site / "top.py").unlink()
    _, missing = _view(tmp_path, site, ["pkg"])
    assert sorted(p.name for p in missing) == ["gone.py", "top.py"]


def test_the_closure_follows_extras_and_markers_and_reports_what_is_not_there(tmp_path):
    site = tmp_path / "site"
    _dist(site, "app", {"app.py": ""}, ("lib[fast]", "never; python_version < '3'"))
    _dist(site, "lib", {"lib.py": ""}, ("speedup; extra == 'fast'", "slow; extra == 'slow'"))
    _dist(site, "speedup", {"speedup.py": ""})
    _dist(site, "slow", {"slow.py": ""})
    installed = siteview.Installed([str(site)])
    needed = siteview.closure(["app", "absent", "lib>=2", "not a requirement ["], installed)
    assert sorted(needed.found) == ["app", "lib", "speedup"]
    assert needed.missing == ["absent", "lib>=2"]  # lib 1.0 does not satisfy >=2
    assert needed.unreadable == ["not a requirement ["]
    unchecked = siteview.closure(["lib>=2"], installed, check_versions=False)
    assert list(unchecked.found) == ["lib"] and unchecked.missing == []
