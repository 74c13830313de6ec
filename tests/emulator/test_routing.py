"""The one route table: templates, the dispatcher's 404s, and every emulator method as one row."""

from __future__ import annotations

import re

import pytest

from kfp_spot.emulator import routes
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.routing import (
    PARENT,
    Request,
    Route,
    RouteGroup,
    RouteTable,
    compile_template,
)
from kfp_spot.emulator.serving import routes as serving_routes

JOB = "projects/local-project/locations/us-central1/customJobs/123"


def _answer(api: object, request: Request) -> dict:
    return {"api": api, **request.params}


def table() -> RouteTable:
    return RouteTable(
        RouteGroup("jobs", routes.ROUTES, routes.SERVED),
        RouteGroup("serving", serving_routes.ROUTES, serving_routes.SERVED),
    )


def example(template: str) -> str:
    """A path the template matches: the first choice, a valid parent, ``x`` for other wildcards."""
    text = template.replace(PARENT, "projects/local-project/locations/us-central1")
    text = re.sub(r"\(([^|)]+)[^)]*\)", r"\1", text)
    text = re.sub(r"\{[a-z_]+=([^}]*)\}", r"\1", text)
    return text.replace("*", "x").replace("+", "x")


def test_templates_compile_to_the_path_patterns():
    pattern = compile_template("/(v1|v1beta1)/{name=projects/+/locations/+/customJobs/*}:cancel")
    found = pattern.fullmatch("/v1beta1/projects/a:b/locations/l/customJobs/7:cancel")
    assert found is not None and found["name"] == "projects/a:b/locations/l/customJobs/7"
    assert (
        pattern.fullmatch("/v1/projects/local-project/locations/l/customJobs/a:b:cancel") is None
    )  # an ID
    assert pattern.fullmatch("/v2/projects/local-project/locations/l/customJobs/7:cancel") is None
    assert pattern.fullmatch("/v1/projects//locations/l/customJobs/7:cancel") is None
    for bad in ("v1/x", "/{name=a/{b=*}}", "/*/x", "/x/{Name=*}"):
        with pytest.raises(ValueError):
            RouteTable(RouteGroup(None, [Route("GET", bad, _answer)], ""))


def test_every_row_is_reached_by_its_own_paths_and_methods():
    routing = table()
    for route in routing.routes:
        found = routing.match(route.method, example(route.template))
        assert found.route is route, route.template


def test_a_known_path_with_another_method_names_the_methods_it_takes():
    with pytest.raises(ApiError) as err:
        table().match("GET", f"/v1/{JOB}:cancel")
    assert err.value.http_status == 404
    assert f"GET is not offered on /v1/{JOB}:cancel; it takes POST" in str(err.value)
    with pytest.raises(ApiError, match="it takes DELETE, GET"):
        table().match("PATCH", f"/v1/{JOB}")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "*",
        f"/v1/{JOB}/",
        f"//v1/{JOB}",
        f"/v2/{JOB}",
        f"/ui/{JOB}",  # /ui/ is for operations only
        "/emulator/v1/health/x",
        f"/v1/{JOB}/attempts",  # an extension: /emulator/v1/ only
        f"/v1/{JOB}:x:cancel",  # an ID holds no ":"
        "/v1/projects/local-project/locations/l/customJobs:list",  # no such custom method
    ],
)
def test_an_unknown_path_is_a_404_saying_what_is_served(path):
    with pytest.raises(ApiError, match="no such resource") as err:
        table().match("GET", path)
    assert err.value.http_status == 404 and "/emulator/v1/..." in str(err.value)


def test_a_handler_gets_its_groups_api_and_the_paths_variables():
    found = table().match(
        "POST", f"/emulator/v1/{JOB.replace('customJobs', 'endpoints')}/deployedModels/9:preempt"
    )
    assert found.api == "serving" and found.params["dm"] == "9"
    assert table().match("GET", f"/v1/{JOB}").params == {"name": JOB}
    assert table().match("GET", "/emulator/v1/health").api == "jobs"


def test_two_rows_for_one_method_and_template_are_refused():
    row = Route("GET", "/emulator/v1/health", _answer)
    with pytest.raises(ValueError, match="two routes"):
        RouteTable(RouteGroup(None, [row], ""), RouteGroup(None, [row], ""))


def test_a_new_method_is_one_row_and_its_handler():
    extra = Route("GET", "/emulator/v1/{name=projects/+/locations/+/customJobs/*}/events", _answer)
    routing = RouteTable(RouteGroup("jobs", (*routes.ROUTES, extra), routes.SERVED))
    found = routing.match("GET", f"/emulator/v1/{JOB}/events")
    assert found.route.handler(found.api, Request(found.params, None, b"")) == {
        "api": "jobs",
        "name": JOB,
    }


def test_a_request_is_tried_against_one_template():
    """The dispatcher keys templates by first segment, depth, collection and custom method."""
    shapes = table()._shapes  # the index itself: what a request costs is what this test is about
    assert all(len(paths) == 1 for shape in shapes.values() for paths in shape.paths.values())


def test_every_vertex_row_names_the_permission_vertex_checks():
    """A refused project's 403 names the row's IAM permission; the emulator's own rows have none."""
    for route in table().routes:
        own = route.template.startswith("/emulator/")
        assert bool(route.permission) != own, route.template
        if not own:
            assert re.fullmatch(r"aiplatform\.(\w+|\{collection\})\.[a-z]\w*", route.permission)
