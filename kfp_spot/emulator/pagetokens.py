"""List page tokens: opaque, signed, and tied to the query they continue, as Vertex AI's are.

A token carries a position (the last row of the page, or an offset) and the query's key (parent
and filter), signed with the state dir's secret. A token that was not issued here, was edited, or
belongs to another query is refused with INVALID_ARGUMENT naming ``page_token``, so client code
cannot come to depend on tokens it builds itself.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json

from kfp_spot.emulator.errors import ApiError

_MAC_BYTES = 16


class PageTokens:
    """Issue and read page tokens signed with ``secret``."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, "sha256").digest()[:_MAC_BYTES]

    def issue(self, position: int, query_key: str) -> str:
        """The token of the page that continues after ``position`` of query ``query_key``."""
        payload = json.dumps({"after": position, "query": query_key}, separators=(",", ":"))
        raw = self._mac(payload.encode()) + payload.encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def read(self, token: str, query_key: str) -> int:
        """The position ``token`` continues after.

        Raises:
            ApiError: INVALID_ARGUMENT on ``page_token``: not a token of this service, or one of
                another query.
        """
        bad = ApiError(
            "INVALID_ARGUMENT",
            "pageToken is not a token this service returned for this query; pass "
            "nextPageToken from the previous page with the same parent and filter, or none for "
            "the first page",
            "page_token",
        )
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, binascii.Error):
            raise bad from None
        mac, payload = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise bad
        doc = json.loads(payload)
        if doc.get("query") != query_key:
            raise ApiError(
                "INVALID_ARGUMENT",
                "pageToken belongs to another query: keep parent and filter the same while "
                "paging (pageSize and readMask may change)",
                "page_token",
            )
        return int(doc["after"])
