"""Importing the emulator and building an ``Emulator`` does not import Vertex AI's GAPIC package.

``kfp-spot run``, ``kfp-spot emulator start`` and many test modules (in every pytest-xdist
worker, at collection) import ``kfp_spot.emulator``; ``google.cloud.aiplatform_v1``'s ``__init__``
imports every service of the API (seconds of CPU under load), so the emulator loads it when it
starts serving. Each probe runs in a fresh interpreter and inspects its ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_PROBE = """
import json, sys
from kfp_spot.emulator import Emulator
emulator = Emulator(sys.argv[1])
before = sorted(m for m in sys.modules if m.startswith("google.cloud.aiplatform"))
if sys.argv[2] == "start":
    with emulator:
        pass
after = sorted(m for m in sys.modules if m.startswith("google.cloud.aiplatform"))
print(json.dumps([before, after]))
"""


def _gapic_modules(state_dir: str, action: str) -> tuple[list[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, state_dir, action],
        capture_output=True,
        text=True,
        check=True,
    )
    before, after = json.loads(done.stdout)
    return before, after


def test_importing_the_emulator_and_building_one_loads_no_gapic_module(tmp_path: Path) -> None:
    before, _ = _gapic_modules(str(tmp_path / "state"), "build")
    services = [m for m in before if m.startswith("google.cloud.aiplatform_v1.services.")]
    assert services == [], f"kfp_spot.emulator imports {len(services)} GAPIC service modules"
    assert before == [], f"kfp_spot.emulator imports {before[:5]}"


def test_starting_the_emulator_loads_the_gapic_types_it_serves(tmp_path: Path) -> None:
    # The probe above would pass vacuously if nothing ever loaded GAPIC in that interpreter.
    _, after = _gapic_modules(str(tmp_path / "state"), "start")
    assert "google.cloud.aiplatform_v1.types.custom_job" in after
