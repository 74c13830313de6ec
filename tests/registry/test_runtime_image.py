"""The runtime image's Dockerfile and build context (no Docker engine here: what can be checked
without one is checked by building the package from the same context)."""

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kfp_spot

REPO = Path(__file__).resolve().parents[2]


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's matching for the pattern forms our .dockerignore uses (no '!' exceptions)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        pat = pattern.rstrip("/")
        if pat.startswith("**/"):
            if any(fnmatch.fnmatch(part, pat[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatch(prefix, pat) for prefix in prefixes):
            return True
    return False


def test_dockerfile_builds_from_python_311_slim_and_installs_this_package():
    text = (REPO / "Dockerfile").read_text()
    assert text.startswith("# syntax=docker/dockerfile:1\n")  # a parser directive: first line only
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.MULTILINE)
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert froms and all(f == "${PYTHON_IMAGE}" for f in froms)
    assert "pip wheel --no-deps --wheel-dir /wheels ." in text
    assert re.search(r"pip install .*kfp_spot-\*\.whl|pip install \"\$\{wheel\}", text)


def test_make_image_tags_with_the_runtime_image():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nimage:", 1)[1].split("\n\n", 1)[0]
    assert "docker build -t" in recipe and "kfp_spot.RUNTIME_IMAGE" in recipe
    assert kfp_spot.RUNTIME_IMAGE.endswith(f":{kfp_spot.__version__}")


@pytest.mark.slow
def test_build_context_holds_the_whole_package(tmp_path: Path):
    if not (REPO / ".git").exists():
        pytest.skip("needs the git checkout to know the tracked files")
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    patterns = dockerignore_patterns()
    context = tmp_path / "context"
    copied = []
    for rel in tracked:
        if ignored(rel, patterns) or not (REPO / rel).is_file():
            continue
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, context / rel)
        copied.append(rel)
    assert not any(rel.startswith((".venv/", "tests/", ".git/")) for rel in copied)
    assert {"pyproject.toml", "setup.py", "README.md"} <= set(copied)  # the build reads them

    # The wheel's library part is what setuptools' build_py lays out (package discovery and
    # package data); building the wheel itself would need `wheel` and a newer setuptools from the
    # network, which the Dockerfile's build stage has and this offline test does not.
    lib = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
        cwd=context,
        check=True,
        capture_output=True,
    )
    names = {p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file()}
    # What the components and the CLI load at run time, inside the image.
    for needed in (
        "kfp_spot/__init__.py",
        "kfp_spot/registry/context.json",
        "kfp_spot/reports/timeline.py",
        "kfp_spot/components/__init__.py",
        "kfp_spot/pipelines/__init__.py",
    ):
        assert needed in names, f"{needed} missing from the image's package"
