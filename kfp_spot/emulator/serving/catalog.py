"""What the serving APIs share: resource names, request parsing, operations, paging, views.

- :func:`canonical` (a project by ID or number; the store keeps the number), with the floor's
  ``MODEL_NAME``/``ENDPOINT_NAME`` patterns;
- :func:`parse_request`: a decoded JSON body as a request message, refused as Vertex refuses it;
  :func:`clear_output_only` drops what a request may carry but the service ignores;
- :func:`new_operation` and :func:`stamp`: long-running operation shells and timestamps;
- :func:`rule_refusal` (a floor rule's refusal as Vertex's 400) and :func:`page` (a list's
  :class:`ListQuery`: its filter, order, read mask and page tokens);
- :class:`Catalog`: the models, endpoints and deployed models of the store, found by name and
  viewed as protos.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.cloud.aiplatform_v1.types.deployed_model_ref import DeployedModelRef
from google.cloud.aiplatform_v1.types.endpoint import DeployedModel, Endpoint
from google.cloud.aiplatform_v1.types.model import Model
from google.cloud.aiplatform_v1.types.operation import DeleteOperationMetadata
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.protobuf.message import Message

from kfp_spot.emulator import filters, listing, names
from kfp_spot.emulator.errors import ApiError, rule_error
from kfp_spot.emulator.pagetokens import PageTokens
from kfp_spot.emulator.payloads import WHOLE_REQUEST, parse_message
from kfp_spot.emulator.serving import store as st
from kfp_spot.vertex.model_endpoint import ENDPOINT_NAME, MODEL_NAME
from kfp_spot.vertex.values import InvalidFieldError

_PARENT = r"projects/[^/]+/locations/[^/]+"
_SCOPED = re.compile(rf"({_PARENT})(/.*)?")
__all__ = [
    "CODE_CANCELLED",
    "CODE_FAILED_PRECONDITION",
    "CODE_INVALID_ARGUMENT",
    "DEPLOYED_MODEL_OUTPUT_ONLY",
    "ENDPOINT_NAME",
    "ENDPOINT_OUTPUT_ONLY",
    "MODEL_NAME",
    "MODEL_OUTPUT_ONLY",
    "Catalog",
    "ListQuery",
    "canonical",
    "clear_output_only",
    "new_operation",
    "page",
    "parse_request",
    "rule_refusal",
    "stamp",
]
CODE_INVALID_ARGUMENT = 3
CODE_CANCELLED = 1
CODE_FAILED_PRECONDITION = 9


# Fields the API reference marks "Output only", which Vertex AI ignores in a request: OUTPUT_ONLY
# in google/api/field_behavior.proto is "provided in responses, but including the field in a
# request does nothing (the server must ignore it and must not throw an error as a result of the
# field's presence)". Cleared before a request's resource is judged and stored, as a CustomJob's
# are (``jobs._OUTPUT_ONLY``): kept, they were answered back (a Model "deployed" to an endpoint
# that does not exist, a DeployedModel's privateEndpoints and status.message as sent).
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models#Model
MODEL_OUTPUT_ONLY = (
    "version_id",
    "version_create_time",
    "version_update_time",
    "supported_export_formats",
    "training_pipeline",
    "supported_deployment_resources_types",
    "supported_input_storage_formats",
    "supported_output_storage_formats",
    "create_time",
    "update_time",
    "deployed_models",
    "model_source_info",
    "original_model_info",
    "metadata_artifact",
    "satisfies_pzs",
    "satisfies_pzi",
)
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints#Endpoint
# (deployedModels is output only too, but the floor's check_endpoint refuses it on create, naming
# :deployModel, rather than dropping a deployment silently).
ENDPOINT_OUTPUT_ONLY = (
    "name",
    "create_time",
    "update_time",
    "model_deployment_monitoring_job",
    "dedicated_endpoint_dns",
    "satisfies_pzs",
    "satisfies_pzi",
    "private_service_connect_config.service_attachment",
    "private_service_connect_config.psc_automation_configs.ip_address",
    "private_service_connect_config.psc_automation_configs.forwarding_rule",
    "private_service_connect_config.psc_automation_configs.state",
    "private_service_connect_config.psc_automation_configs.error_message",
)
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints#DeployedModel
DEPLOYED_MODEL_OUTPUT_ONLY = ("model_version_id", "create_time", "private_endpoints", "status")


def clear_output_only(pb: Any, fields: tuple[str, ...]) -> None:
    """Clear ``fields`` (one of the ``*_OUTPUT_ONLY`` lists) of the raw protobuf ``pb``.

    A dotted path (``a.b``) clears ``b`` of the message ``a`` when it is set, of each message
    when ``a`` is repeated.
    """
    for field in fields:
        head, _, rest = field.partition(".")
        if not rest:
            pb.ClearField(head)
            continue
        value = getattr(pb, head)
        if isinstance(value, Message):
            if pb.HasField(head):
                clear_output_only(value, (rest,))
        else:
            for item in value:
                clear_output_only(item, (rest,))


def canonical(name: str) -> str:
    """``name`` with its ``projects/P/locations/L`` prefix written with the project number.

    Vertex accepts a project by ID or number and answers with the number; the store keeps
    names in that form, so both spellings reach the same resource.
    """
    match = _SCOPED.fullmatch(name or "")
    if match is None:
        return name
    return names.parse_parent(match.group(1)).canonical + (match.group(2) or "")


def parse_request(body: Any, message_cls: Any, field: str = "*") -> Any:
    """A decoded JSON body as a ``message_cls`` (proto-plus class), refused as Vertex refuses it.

    ``field`` is the request field the body binds to; ``*`` (the whole request) names nested
    fields by their own paths (``model.display_name``).
    """
    try:
        return parse_message(body, message_cls.pb(), field)
    except ApiError as err:
        if field != WHOLE_REQUEST or not err.field or not err.field.startswith("*."):
            raise
        message = err.message
        violations = []
        for at, text in err.violations or [(err.field, err.description)]:
            where = at[2:] if at and at.startswith("*.") else at
            if where != at:
                message = message.replace(f"'{at}'", f"'{where}'")
                text = text.replace(f"'{at}'", f"'{where}'")
            violations.append((where, text))
        raise ApiError(
            err.status, message, violations[0][0], violations=violations if err.violations else ()
        ) from None


def stamp(pb_time: Any, when: float) -> None:
    """Set a protobuf Timestamp to ``when`` (seconds since the epoch)."""
    pb_time.FromNanoseconds(int(when * 1e9))


def new_operation(name: str, metadata_cls: Any) -> Any:
    """A running operation ``name`` whose metadata is a ``metadata_cls`` created now."""
    op = operations_pb2.Operation(name=name, done=False)
    meta = metadata_cls.pb()()
    stamp(meta.generic_metadata.create_time, time.time())
    stamp(meta.generic_metadata.update_time, time.time())
    op.metadata.Pack(meta)
    return op


def rule_refusal(err: InvalidFieldError, request_cls: Any) -> ApiError:
    """The 400 for a request the floor's rules refuse (:mod:`kfp_spot.vertex.model_endpoint`).

    In Vertex's form, naming the field as a path in ``request_cls`` (a proto-plus request class,
    e.g. ``DeployModelRequest``), in snake_case.
    """
    return rule_error(err.field, err.reason, request_cls.pb().DESCRIPTOR)


# What each serving list filters with, and the message its readMask names paths of.
_LISTED = {
    "models": (filters.MODELS, Model.pb()),
    "endpoints": (filters.ENDPOINTS, Endpoint.pb()),
}


@dataclass(frozen=True)
class ListQuery:
    """The query parameters of ``models.list`` / ``endpoints.list`` (``ListModelsRequest``).

    Attributes:
        filter: the method's filter (:data:`kfp_spot.emulator.filters.MODELS` and ``ENDPOINTS``).
        page_size: 0 for the default (100); at most 1000 are returned.
        page_token: a token this query's previous page returned.
        order_by: ``display_name, create_time desc`` (``listing.compile_order``).
        read_mask: the fields to return (``displayName,labels``); "" for all.
    """

    filter: str = ""
    page_size: int = 0
    page_token: str = ""
    order_by: str = ""
    read_mask: str = ""


def page(
    table: str,
    pbs: list[Any],
    query: ListQuery,
    *,
    tokens: PageTokens,
    query_key: str,
) -> tuple[list[Any], str]:
    """The page of ``pbs`` (``table``'s Models or Endpoints) ``query`` asks for, and the next token.

    Filtered by the method's own grammar and ordered by ``orderBy`` (both as
    ``projects.locations.models.list`` / ``endpoints.list`` document them), newest first
    otherwise; only the ``readMask`` fields are returned. Tokens are signed and tied to
    ``query_key`` (the collection, parent, filter and order), as the CustomJob list's are.
    """
    grammar, message = _LISTED[table]
    try:
        predicate = filters.compile_filter(query.filter or "", grammar)
    except filters.FilterError as err:
        raise ApiError("INVALID_ARGUMENT", f"filter: {err}", "filter") from None
    try:
        order = listing.compile_order(query.order_by)
    except filters.FilterError as err:
        raise ApiError("INVALID_ARGUMENT", f"orderBy: {err}", "order_by") from None
    if query.page_size < 0:
        raise ApiError(
            "INVALID_ARGUMENT", f"pageSize is {query.page_size}; it must be >= 0", "page_size"
        )
    try:
        mask = listing.field_mask(query.read_mask, message.DESCRIPTOR)
    except filters.FilterError as err:
        raise ApiError("INVALID_ARGUMENT", f"readMask: {err}", "read_mask") from None
    matching = [
        pb
        for pb in pbs
        if predicate(
            filters.Record(
                "",
                pb.display_name,
                dict(pb.labels),
                pb.create_time.ToNanoseconds() / 1e9,
                id=pb.name.rsplit("/", 1)[-1],
            )
        )
    ]
    matching = listing.sort_by(matching, order)
    offset = tokens.read(query.page_token, query_key) if query.page_token else 0
    size = min(query.page_size or 100, 1000)
    more = offset + size < len(matching)
    token = tokens.issue(offset + size, query_key) if more else ""
    return [listing.masked(pb, mask) for pb in matching[offset : offset + size]], token


class Catalog:
    """The serving resources of ``store``, looked up by name as Vertex names them.

    Args:
        store: ``serving.sqlite``.
        page_tokens: signs the list pages' tokens.
    """

    def __init__(self, store: st.ServingStore, page_tokens: PageTokens) -> None:
        self.store = store
        self.page_tokens = page_tokens

    @staticmethod
    def parent(parent: str) -> str:
        """``projects/P/locations/L`` as the store keeps it (P the project number)."""
        try:
            return names.parse_parent(parent).canonical
        except ValueError as err:
            raise ApiError("INVALID_ARGUMENT", f"parent: {err}", "parent") from None

    def list_page(
        self, table: str, parent: str, to_pb: Callable[[st.Row], Any], query: ListQuery
    ) -> tuple[list[Any], str]:
        """A page of ``table``'s resources (``models``/``endpoints``) under ``parent``.

        Newest first unless ``query.order_by`` says otherwise, with the next page token (signed,
        tied to the table, parent, filter and order).
        """
        key = self.parent(parent)
        pbs = [to_pb(row) for row in self.store.rows(table, key)]
        query_key = f"{table}|{key}|{query.filter}"
        if query.order_by:  # another order is another query ("[": no "table|" key begins so)
            query_key = json.dumps([table, key, query.filter, query.order_by])
        return page(table, pbs, query, tokens=self.page_tokens, query_key=query_key)

    def model_row(self, name: str) -> st.Row:
        """The stored Model ``name`` (``@1`` or ``@`` one of its aliases), else NOT_FOUND."""
        match = MODEL_NAME.fullmatch(canonical(name))
        if not match:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{name!r} is not a Model name; expected "
                "projects/PROJECT/locations/LOCATION/models/ID[@VERSION]",
                "name",
            )
        row = self.store.get("models", match.group(2))
        version = match.group(3)
        if (
            row is None
            or row.deleted
            or row.parent != match.group(1)
            or (
                version not in (None, "1")
                and version not in Model.pb().FromString(row.spec).version_aliases
            )
        ):
            raise ApiError("NOT_FOUND", f"Model {name} does not exist.", "name")
        return row

    def endpoint_row(self, name: str) -> st.Row:
        """The stored Endpoint ``name``, else NOT_FOUND."""
        match = ENDPOINT_NAME.fullmatch(canonical(name))
        if not match:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{name!r} is not an Endpoint name; expected "
                "projects/PROJECT/locations/LOCATION/endpoints/ID",
                "name",
            )
        row = self.store.get("endpoints", match.group(2))
        if row is None or row.deleted or row.parent != match.group(1):
            raise ApiError("NOT_FOUND", f"Endpoint {name} does not exist.", "name")
        return row

    def model_pb(self, row: st.Row) -> Any:
        """The Model of ``row`` with the endpoints that serve it (``deployedModels``)."""
        pb = Model.pb()()
        pb.ParseFromString(row.spec)
        for dep in self.store.deployments(states=(st.DEPLOYED, st.UNDEPLOYING)):
            dm = self.dm_pb(dep)
            served = MODEL_NAME.fullmatch(dm.model)
            if served is not None and served.group(2) == row.id:
                ref = DeployedModelRef.pb()(
                    endpoint=f"{row.parent}/endpoints/{dep.endpoint_id}", deployed_model_id=dep.id
                )
                pb.deployed_models.append(ref)
        return pb

    @staticmethod
    def dm_pb(dep: st.DeploymentRow) -> Any:
        """The DeployedModel of a deployment row, as it was deployed."""
        pb = DeployedModel.pb()()
        pb.ParseFromString(dep.spec)
        return pb

    def done_delete(self, resource: str) -> Any:
        """The (done, stored) delete operation of ``resource``."""
        op = new_operation(f"{resource}/operations/{names.new_id()}", DeleteOperationMetadata)
        op.done = True
        op.response.Pack(empty_pb2.Empty())
        self.store.put_operation(op.name, op.SerializeToString(), True)
        return op
