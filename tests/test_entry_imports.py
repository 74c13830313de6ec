"""Importing a component's runtime entry module does not import Vertex AI's GAPIC client.

Every KFP task imports its component's entry module before doing any work; importing
``google.cloud.aiplatform_v1`` (every service client and type of the API) costs seconds, so it is
loaded only where a request is built or sent. Each module is imported in a fresh interpreter and
its ``sys.modules`` inspected: no ``google.cloud.aiplatform_v1`` service, and no part of that
package at all (on this Python its ``__init__`` imports every service). How long the imports take
is measured by benchmarks/import_times.py, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# The module each component body imports (docs/ARCHITECTURE.md, "Runtime entry points").
ENTRY_MODULES = (
    "kfp_spot.packaging.component",
    "kfp_spot.jobs.entry",
    "kfp_spot.evaluation.component",
    "kfp_spot.promotion",
    "kfp_spot.serving.entry",
)
_PROBE = (
    "import importlib, json, sys; importlib.import_module(sys.argv[1]); "
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('google.cloud.aiplatform'))))"
)


def _gapic_loaded_by(module: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, module], capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_an_entry_module_imports_no_gapic_service(module):
    loaded = _gapic_loaded_by(module)
    services = [m for m in loaded if m.startswith("google.cloud.aiplatform_v1.services.")]
    assert services == [], f"{module} imports {len(services)} GAPIC service modules"
    assert loaded == [], f"{module} imports {loaded[:5]}"


def test_the_probe_sees_gapic_when_it_is_imported():
    loaded = _gapic_loaded_by("google.cloud.aiplatform_v1.services.job_service")
    assert "google.cloud.aiplatform_v1.services.job_service" in loaded


def test_the_evaluation_runner_imports_no_other_kfp_spot_module():
    # ``python -m kfp_spot.evaluation.runner`` runs in the package's environment for every
    # evaluation: importing its package must not load the evaluator around it.
    probe = (
        "import json, sys, kfp_spot.evaluation.runner; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kfp_spot'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [
        "kfp_spot",
        "kfp_spot.evaluation",
        "kfp_spot.evaluation.runner",
    ]
