"""api_endpoint: scheme, host and port are checked; every other value is named, never sent."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.vertex.client import resolve_endpoint
from kfp_spot.vertex.values import InvalidFieldError

labels = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12)
hostnames = st.lists(labels, min_size=1, max_size=4).map(".".join)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
ports = st.integers(1, 65535)


@given(st.one_of(hostnames, ipv4), ports)
def test_http_host_and_port_is_the_emulator(host, port):
    endpoint = resolve_endpoint("us-central1", f"http://{host}:{port}")
    assert endpoint.local
    assert endpoint.base_url == f"http://{host}:{port}"
    assert endpoint.resource_uri("projects/local-project/locations/l/customJobs/1").startswith(
        endpoint.base_url + "/v1/"
    )


@given(hostnames, st.one_of(st.none(), ports), st.booleans())
def test_https_or_bare_hosts_are_vertex_endpoints(host, port, with_scheme):
    if not with_scheme and port is None and "." not in host:
        host += ".example.com"  # a bare word is refused (below)
    netloc = host if port is None else f"{host}:{port}"
    endpoint = resolve_endpoint("us-central1", f"https://{netloc}" if with_scheme else netloc)
    assert not endpoint.local
    assert endpoint.api_endpoint == netloc  # what the gRPC client takes
    assert endpoint.base_url == f"https://{netloc}"


@given(st.text(max_size=40))
def test_any_text_is_an_endpoint_or_named(text):
    try:
        endpoint = resolve_endpoint("us-central1", text)
    except InvalidFieldError as exc:
        assert exc.field == "api_endpoint"
        assert "\n" not in str(exc)
        assert "http://HOST:PORT" in str(exc)
    else:
        assert not any(c.isspace() for c in text)
        assert endpoint.base_url.startswith(("http://", "https://"))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("http://", "no host"),
        ("http://127.0.0.1:abc", "1 to 65535"),
        ("http://127.0.0.1:0", "zero port"),
        ("http://127.0.0.1:65536", "1 to 65535"),
        ("http://127.0.0.1:", "empty or zero port"),
        ("http://:8080", "no host"),
        ("ftp://x", "scheme 'ftp'"),
        ("http://127.0.0.1:1/v1", "path"),
        ("http://127.0.0.1:1?x=1", "query"),
        ("a/b", "path"),
        ("http://user:pw@host:1", "credentials"),
        ("http://host_name:1", "not a host name"),
        ("http://127.0.0.1:8080\n", "whitespace"),
        # A word given bare was sent to https://notaurl: a URL that cannot be meant.
        ("notaurl", "neither a URL nor a domain name or IP address"),
        ("localhost", "neither a URL nor a domain name"),
    ],
)
def test_bad_endpoints_say_what_is_wrong(bad, why):
    with pytest.raises(InvalidFieldError) as info:
        resolve_endpoint("us-central1", bad)
    assert info.value.field == "api_endpoint"
    assert why in str(info.value)


@pytest.mark.parametrize("good", ["localhost:8443", "10.0.0.1", "[::1]", "https://proxy"])
def test_a_bare_host_with_a_port_an_address_or_a_scheme_is_taken(good):
    assert resolve_endpoint("us-central1", good).base_url.startswith("https://")


def test_the_default_endpoint_needs_a_vertex_region():
    with pytest.raises(InvalidFieldError) as info:
        resolve_endpoint("us-central1\n")
    assert info.value.field == "location"
