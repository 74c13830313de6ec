"""GAPIC's packages deferred: a task loads the modules it uses, and nothing else sees a difference.

Each case runs in a fresh interpreter: the deferral acts on ``sys.modules``, which this test
process filled long ago.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from kfp_spot import lightimports
from tests.test_import_cycles import TREES, import_statements, modules

REPO = Path(__file__).resolve().parents[1]
ROOT = lightimports.GAPIC_PACKAGES[0]


def _run(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_a_launch_builds_checks_and_reads_its_job_with_only_the_job_service_loaded():
    seen = _run(
        """
import json, sys
from kfp_spot import lightimports
lightimports.defer_gapic_packages()
from kfp_spot.jobs.inputs import JobInputs
from kfp_spot.jobs.outcome import classify
from kfp_spot.jobs.spec import build_custom_job, check_job
from kfp_spot.vertex.client import make_job_client, resolve_endpoint
inputs = JobInputs(project="test-proj", location="us-central1", package_uris=["gs://bucket/t-0.1.tar.gz"],
                   python_module="trainer.task", base_output_directory="gs://bucket/run")
job = build_custom_job(inputs)
check_job(job, inputs)
job.state = 5  # JOB_STATE_FAILED
classify(job)
make_job_client(resolve_endpoint("us-central1", "http://127.0.0.1:9"))
print(json.dumps({
    "deferred": [lightimports.is_deferred(p) for p in lightimports.GAPIC_PACKAGES],
    "services": sorted({m.split(".")[4] for m in sys.modules
                        if m.startswith("google.cloud.aiplatform_v1.services.")}),
}))
"""
    )
    assert seen == {"deferred": [True, True, True], "services": ["job_service"]}


def test_a_deferred_package_is_completed_by_the_first_name_asked_of_it():
    code = """
import json, sys
from kfp_spot import lightimports
defer = sys.argv[-1] == "defer"
if defer:
    lightimports.defer_gapic_packages()
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    # the SDK beside the emulator (docs/emulator.md), imported while the packages are deferred
    from google.cloud import aiplatform
    assert aiplatform.CustomJob.__name__ == "CustomJob"
import google.cloud.aiplatform_v1 as v1
from google.cloud.aiplatform_v1 import JobServiceClient as client, CustomJob as job
from google.cloud.aiplatform_v1.types import JobState
seen = {
    "dir": dir(v1), "types": dir(v1.types), "services": dir(v1.services),
    "all": list(v1.__all__), "state": int(JobState.JOB_STATE_SUCCEEDED),
}
if defer:
    seen["same"] = client is JobServiceClient and job is CustomJob
else:  # deferring after a plain import changes nothing
    lightimports.defer_gapic_packages()
    seen["same"] = sys.modules["google.cloud.aiplatform_v1"] is v1
seen["deferred"] = [lightimports.is_deferred(p) for p in lightimports.GAPIC_PACKAGES]
print(json.dumps(seen))
"""
    plain = subprocess.run([sys.executable, "-c", code, "plain"], capture_output=True, text=True)
    deferred = subprocess.run([sys.executable, "-c", code, "defer"], capture_output=True, text=True)
    assert plain.returncode == 0 == deferred.returncode, plain.stderr + deferred.stderr
    seen = json.loads(deferred.stdout)
    assert seen == json.loads(plain.stdout)
    assert seen["same"] and seen["deferred"] == [False, False, False]


def test_kfp_spot_imports_gapic_names_from_the_modules_that_define_them():
    """``from google.cloud.aiplatform_v1[.types|.services] import Name`` completes a deferred
    package (every service, ~0.9 s); the defining module (``...types.custom_job``) does not.
    Components and pipelines too: they run in the same processes."""
    offenders = [
        f"{path.relative_to(REPO)}:{node.lineno} from {node.module}"
        for path in modules(TREES).values()
        for node in import_statements(path)
        if isinstance(node, ast.ImportFrom) and node.module in lightimports.GAPIC_PACKAGES
    ]
    assert offenders == []


def test_the_cli_pipeline_commands_import_kfp_without_its_client_and_leak_no_variable():
    seen = _run(
        """
import json, os, sys
from kfp_spot.cli import main
os.environ.pop("_KFP_RUNTIME", None)
try:  # refused after the pipeline's parameters are read from its KFP definition
    main(["run", "--run-dir", "unused", "--param", "no_such_parameter=1"])
except SystemExit as exc:
    code = exc.code
import kfp.compiler, kfp.dsl, kfp.local
print(json.dumps({
    "code": code,
    "client": [m for m in ("kfp.client", "kubernetes") if m in sys.modules],
    "kfp": [hasattr(kfp, name) for name in ("dsl", "local", "compiler", "Client")],
    "variable": os.environ.get("_KFP_RUNTIME"),
}))
"""
    )
    assert seen == {"code": 2, "client": [], "kfp": [True, True, True, False], "variable": None}


def test_kfp_is_imported_without_its_client_when_it_is_imported_and_as_usual_after():
    seen = _run(
        """
import json, os, sys
os.environ["_KFP_RUNTIME"] = "false"
from kfp_spot import lightimports
lightimports.kfp_without_client()
lightimports.kfp_without_client()
before = "kfp" in sys.modules
import kfp
import kfp.dsl
print(json.dumps({
    "before": before, "variable": os.environ["_KFP_RUNTIME"], "client": hasattr(kfp, "Client"),
    "loader": type(kfp.__loader__).__name__, "spec": type(kfp.__spec__.loader).__name__,
    "hooks": [type(f).__name__ for f in sys.meta_path if "Kfp" in type(f).__name__],
}))
"""
    )
    assert seen == {
        "before": False,
        "variable": "false",
        "client": False,
        "loader": "SourceFileLoader",
        "spec": "SourceFileLoader",
        "hooks": [],
    }
