"""Pipeline templates in a registry: a local KFP template registry and push/pull helpers.

``RegistryServer`` speaks the protocol ``kfp.registry.RegistryClient`` uses against Artifact
Registry's KFP format and keeps its state on disk; :func:`push`, :func:`pull`, :func:`list_tags`,
:func:`list_untagged` and :func:`list_packages` work against it and against Artifact Registry
alike. See docs/registry.md.
"""

from kfp_spot.registry.client import (
    PushResult,
    TagInfo,
    check_template,
    list_packages,
    list_tags,
    list_untagged,
    pull,
    push,
    push_tags,
)
from kfp_spot.registry.hosts import (
    check_host,
    is_artifact_registry,
    registry_client,
    template_url_refusal,
)
from kfp_spot.registry.server import CONTEXT_FILE, RegistryServer, RegistryServerError
from kfp_spot.registry.transport import RegistryError

__all__ = [
    "CONTEXT_FILE",
    "PushResult",
    "RegistryError",
    "RegistryServer",
    "RegistryServerError",
    "TagInfo",
    "check_host",
    "check_template",
    "is_artifact_registry",
    "list_packages",
    "list_tags",
    "list_untagged",
    "pull",
    "push",
    "push_tags",
    "registry_client",
    "template_url_refusal",
]
