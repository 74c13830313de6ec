"""The HTTP prediction server of one serving replica, as Vertex AI's prebuilt containers run it.

Vertex AI's prebuilt scikit-learn and XGBoost prediction containers load the model file from the
artifact directory (``AIP_STORAGE_URI``), listen on ``AIP_HTTP_PORT``, answer health checks on
``AIP_HEALTH_ROUTE`` and predictions on ``AIP_PREDICT_ROUTE``: ``{"instances": [...]}`` ->
``{"predictions": model.predict(instances)}``. The local emulator runs this file as each serving
replica of a model deployed with such an image.

The file is standalone on purpose (standard library plus the framework the image holds): it runs
in the serving container's environment, which does not hold kfp-spot.

Artifact layouts (Vertex's "exporting model artifacts" page):

- scikit-learn: exactly one of ``model.joblib`` or ``model.pkl``;
- XGBoost: exactly one of ``model.bst`` (a Booster), ``model.joblib`` or ``model.pkl``.

Run: ``python predictor.py`` with ``AIP_HTTP_PORT``, ``AIP_HEALTH_ROUTE``, ``AIP_PREDICT_ROUTE``,
``AIP_STORAGE_URI`` (a local directory here) and ``KFP_SPOT_SERVING_FRAMEWORK`` (``sklearn`` or
``xgboost``) set. SIGTERM stops it (exit 0 once in-flight requests are answered).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ARTIFACTS = {
    "sklearn": ("model.joblib", "model.pkl"),
    "xgboost": ("model.bst", "model.joblib", "model.pkl"),
}
MAX_BODY = 1536 * 1024  # Vertex refuses prediction requests over 1.5 MB


class ModelLoadError(RuntimeError):
    """The artifact directory does not hold a model this image can load."""


def find_artifact(directory: str, framework: str) -> str:
    """The one model file of ``directory`` that ``framework``'s image loads.

    Raises:
        ModelLoadError: none or several of the accepted files are there.
    """
    names = ARTIFACTS.get(framework)
    if names is None:
        raise ModelLoadError(
            f"unknown framework {framework!r}; expected one of {sorted(ARTIFACTS)}"
        )
    present = [n for n in names if os.path.isfile(os.path.join(directory, n))]
    if len(present) != 1:
        found = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        raise ModelLoadError(
            f"the model directory {directory} must contain exactly one of {', '.join(names)} "
            f"for a {framework} prediction image; it contains {found or 'nothing'}"
        )
    return os.path.join(directory, present[0])


def load_model(directory: str, framework: str) -> Any:
    """Load the model the way the prebuilt image does (joblib, pickle or an XGBoost Booster)."""
    path = find_artifact(directory, framework)
    if path.endswith(".bst"):
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(path)
        return booster
    if path.endswith(".joblib"):
        import joblib

        return joblib.load(path)
    with open(path, "rb") as handle:
        return pickle.load(handle)


def predict(model: Any, instances: list[Any]) -> list[Any]:
    """``model.predict(instances)`` as a JSON-able list (a Booster predicts on a DMatrix)."""
    import numpy as np

    data = np.asarray(instances)
    if type(model).__name__ == "Booster":
        import xgboost

        out = model.predict(xgboost.DMatrix(data))
    else:
        out = model.predict(data)
    predictions: list[Any] = np.asarray(out).tolist()
    return predictions


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per request would drown the replica's log

    def _reply(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.split("?")[0] == self.server.health_route:
            self._reply(200, {})
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if 0 < length <= MAX_BODY else b""
        if self.path.split("?")[0] != self.server.predict_route:
            self._reply(404, {"error": f"no route {self.path}"})
            return
        if length > MAX_BODY:
            self.close_connection = True
            self._reply(400, {"error": f"the request is larger than {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError as err:
            self._reply(400, {"error": f"the request body is not JSON: {err}"})
            return
        instances = body.get("instances") if isinstance(body, dict) else None
        if not isinstance(instances, list) or not instances:
            self._reply(400, {"error": 'expected {"instances": [...]} with at least one instance'})
            return
        try:
            predictions = predict(self.server.model, instances)
        except Exception as err:  # noqa: BLE001 - any model error is the request's: answer 400
            self._reply(400, {"error": f"prediction failed: {type(err).__name__}: {err}"})
            return
        self._reply(200, {"predictions": predictions})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, model: Any, predict_route: str, health_route: str) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.model = model
        self.predict_route = predict_route
        self.health_route = health_route


def main() -> int:
    """Load the model, serve until SIGTERM; exit 1 (with the reason on stderr) if it cannot."""
    env = os.environ
    framework = env.get("KFP_SPOT_SERVING_FRAMEWORK", "sklearn")
    try:
        model = load_model(env["AIP_STORAGE_URI"], framework)
    except Exception as err:  # noqa: BLE001 - unpickling a user's file can raise anything
        print(
            f"model server: cannot load the model: {type(err).__name__}: {err}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    server = _Server(
        int(env.get("AIP_HTTP_PORT", "8080")),
        model,
        env.get("AIP_PREDICT_ROUTE", "/predict"),
        env.get("AIP_HEALTH_ROUTE", "/health"),
    )

    def on_term(signum: int, frame: object) -> None:
        print("model server: SIGTERM, shutting down", flush=True)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    print(f"model server: {type(model).__name__} ready on port {server.server_port}", flush=True)
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
