"""Runs deploy_spot_endpoint in its own process (so a test can SIGTERM it): argv[1] is JSON.

With argv[2] ``sigterm-once-the-deploy-is-recorded`` the process sends itself SIGTERM right after
it records the deploy's operation in gcp_resources, before it waits on it: a pipeline cancelled
at that moment.
"""

import json
import os
import signal
import sys

from kfp_spot.serving.deploy import Deployer
from kfp_spot.serving.entry import deploy_spot_endpoint
from tests.jobs.artifacts import FakeArtifact

inputs = json.loads(sys.argv[1])
inputs["model"] = FakeArtifact(uri=inputs.pop("model_uri"))
inputs["endpoint"] = FakeArtifact(uri=inputs.pop("endpoint_uri"))
inputs["vertex_model"] = FakeArtifact()
if sys.argv[2:] == ["sigterm-once-the-deploy-is-recorded"]:
    record = Deployer._record

    def record_then_sigterm(self: Deployer, kind: str, name: str) -> None:
        record(self, kind, name)
        if kind == "VertexLro" and "/endpoints/" in name:  # the deploy's own operation
            os.kill(os.getpid(), signal.SIGTERM)

    Deployer._record = record_then_sigterm  # type: ignore[method-assign]
deploy_spot_endpoint(**inputs)
