"""Each integration imports its own framework, and says in one line when the job lacks it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Blocks the named modules (None in sys.modules: "import x" raises ImportError), then imports
# the integration as training code would.
_PROBE = (
    "import sys\n"
    "for name in sys.argv[2:]:\n"
    "    sys.modules[name] = None\n"
    "import importlib\n"
    "importlib.import_module(sys.argv[1])\n"
)


@pytest.mark.parametrize(
    ("module", "blocked", "framework"),
    [
        ("keras", ["keras"], "Keras 3"),
        ("xgboost", ["xgboost"], "XGBoost"),
        ("huggingface", ["transformers"], "transformers"),
        ("lightning", ["lightning", "pytorch_lightning"], "lightning (or pytorch_lightning)"),
    ],
)
def test_a_missing_framework_is_one_line_saying_who_brings_it(module, blocked, framework):
    integration = f"kfp_spot.trainer.integrations.{module}"
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, integration, *blocked], capture_output=True, text=True
    )
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: {integration} needs {framework}, which cannot be "), last
    assert "add it to your training package's dependencies" in last
    assert "During handling" not in run.stderr  # one error, not a chain


def test_importing_the_package_imports_no_framework():
    code = (
        "import sys, kfp_spot.trainer, kfp_spot.trainer.integrations, "
        "kfp_spot.trainer.integrations.directory\n"
        "print(sorted({'keras', 'xgboost', 'transformers', 'lightning', 'pytorch_lightning', "
        "'torch', 'jax', 'tensorflow'} & set(sys.modules)))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
