"""Runs deploy_spot_endpoint in its own process (so a test can SIGTERM it): argv[1] is JSON."""

import json
import sys

from kfp_spot.serving.entry import deploy_spot_endpoint
from tests.jobs.artifacts import FakeArtifact

inputs = json.loads(sys.argv[1])
inputs["model"] = FakeArtifact(uri=inputs.pop("model_uri"))
inputs["endpoint"] = FakeArtifact(uri=inputs.pop("endpoint_uri"))
inputs["vertex_model"] = FakeArtifact()
deploy_spot_endpoint(**inputs)
