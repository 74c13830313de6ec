"""What counts as a build requirement satisfied here, the one rule for prepare_package's builds
and the emulator's job environments: what pip on the VM would install is not satisfied."""

from __future__ import annotations

from kfp_spot import buildview


def test_what_pip_would_install_is_unmet():
    assert buildview.unmet(["setuptools", "packaging>=20"]) == []
    assert buildview.unmet(["setuptools<1"]) == ["setuptools<1"]
    assert buildview.unmet(["surely-not-installed-kfp-spot-probe"]) == [
        "surely-not-installed-kfp-spot-probe"
    ]
    assert buildview.unmet(["not a requirement!"]) == ["not a requirement!"]


def test_a_marker_that_excludes_this_interpreter_leaves_a_requirement_out():
    assert buildview.unmet(['surely-not-installed-kfp-spot-probe; python_version < "3"']) == []


def test_a_requirement_installed_without_what_it_requires_is_unmet(tmp_path, monkeypatch):
    """pip would install what it lacks; without it the build cannot see it here either."""
    info = tmp_path / "half_installed-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: half-installed\nVersion: 1.0\n"
        "Requires-Dist: surely-not-installed-kfp-spot-probe>=2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert buildview.unmet(["half-installed"]) == ["surely-not-installed-kfp-spot-probe>=2"]
    assert buildview.unmet(["half-installed<1"]) == ["half-installed<1"]
