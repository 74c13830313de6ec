"""What a replica's process sees of the environment: Vertex's variables, the job's, this machine's.

A replica runs as a process of this machine, so it would inherit the shell that started the
emulator. On Vertex AI a job sees its image's variables, Vertex's own and its worker pool's
``env``: :func:`process_env` keeps this machine's variables (proxies, credentials, locales that
a local run needs) but for Vertex's names, where Python finds modules, and what
the job's own code reads that only this machine sets (:mod:`kfp_spot.packaging.envreads`);
:func:`expand_env` expands ``$(NAME)`` in the values of a spec's ``env`` as Vertex AI does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kfp_spot import envcache
from kfp_spot.emulator.replicas import TOKEN_VAR

# The variables the emulator sets; inherited values of these are dropped so that an emulator
# started from inside a training process does not leak its own job's settings.
VERTEX_VARS = (
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLOUD_ML_JOB_ID",
    "CLOUD_ML_PROJECT_ID",
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
)


def process_env(
    base: Mapping[str, str],
    vertex: Mapping[str, str],
    user: Mapping[str, str],
    hidden: Iterable[str] = (),
) -> dict[str, str]:
    """The environment of a replica: host variables, then Vertex's, then the job's own.

    Of the host's, neither Vertex's names, nor where Python finds modules
    (:data:`kfp_spot.envcache.HOST_PYTHON_VARS`: the job sees only its installed packages), nor
    ``hidden`` (what :func:`kfp_spot.packaging.envreads.host_only` found the job's code reading).
    """
    ours = {*VERTEX_VARS, TOKEN_VAR, *hidden}
    env = {k: v for k, v in envcache.job_environ(base).items() if k not in ours}
    env.update(vertex)
    env.update(user)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def expand_env(variables: Iterable[Any], service: Mapping[str, str]) -> dict[str, str]:
    """A spec's ``env`` (``EnvVar`` messages, in order) with ``$(NAME)`` references expanded.

    As the API documents ``EnvVar.value``: a reference is expanded from the variables defined
    before it and the service's own (``service``: ``AIP_MODEL_DIR``, ``CLOUD_ML_JOB_ID``, ...); one
    that cannot be resolved is left unchanged; ``$$`` escapes a ``$`` (``$$(NAME)`` is never
    expanded). The rules are Kubernetes' (``third_party/forked/golang/expansion``).
    """
    out: dict[str, str] = {}
    for var in variables:
        known = {**service, **out}
        out[var.name] = _expand(var.value, known)
    return out


def _expand(text: str, known: Mapping[str, str]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            parts.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":  # an escaped '$'
            parts.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:  # no closing parenthesis: the rest as written
                parts.append(text[i:])
                break
            name = text[i + 2 : end]
            parts.append(known.get(name, f"$({name})"))
            i = end + 1
        else:
            parts.append("$" + nxt)
            i += 2
    return "".join(parts)
