"""The single-value rules of kfp_spot.validation: property-based where the inputs are rich."""

from __future__ import annotations

import ast
import json
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot import vertex
from kfp_spot.vertex import InvalidValueError
from tests.vertex.strategies import PROJECT_ID_CHARS, project_ids

KFP_SPOT = Path(__file__).resolve().parents[2] / "kfp_spot"

# -- durations -------------------------------------------------------------------------------


@given(st.integers(0, vertex.MAX_DURATION_SECONDS), st.sampled_from(["", "s"]))
def test_every_duration_protobuf_holds_parses_to_its_seconds(seconds, unit):
    assert vertex.parse_duration(f"{seconds}{unit}") == seconds


@given(
    st.integers(0, vertex.MAX_DURATION_SECONDS // 86400),
    st.sampled_from([("m", 60), ("h", 3600), ("d", 86400)]),
)
def test_units_scale(number, unit):
    suffix, factor = unit
    assert vertex.parse_duration(f"{number}{suffix}") == number * factor


@given(st.integers(vertex.MAX_DURATION_SECONDS + 1, 10**40))
def test_durations_past_protobufs_range_are_refused(seconds):
    for value in (f"{seconds}s", seconds, float(seconds)):
        with pytest.raises(InvalidValueError, match="at most 315576000000s"):
            vertex.parse_duration(value)


@given(st.one_of(st.text(max_size=30), st.floats(), st.integers(), st.none(), st.booleans()))
def test_any_value_is_a_bounded_duration_or_refused_clearly(value):
    try:
        seconds = vertex.parse_duration(value)
    except InvalidValueError as exc:
        assert "'3600s'" in str(exc)
        assert "\n" not in str(exc)
    else:
        assert 0 <= seconds <= vertex.MAX_DURATION_SECONDS


@pytest.mark.parametrize(
    "bad", ["3600s\n", " 60s", "1.5 h", "-1s", "1e3s", "1.1234567891s", "inf", "nan", True, None]
)
def test_malformed_durations_are_refused(bad):
    with pytest.raises(InvalidValueError):
        vertex.parse_duration(bad)


def test_zero_is_refused_only_when_it_means_nothing():
    assert vertex.parse_duration("0s") == 0
    with pytest.raises(InvalidValueError, match="longer than 0s"):
        vertex.parse_duration("0s", allow_zero=False)


# -- project IDs -----------------------------------------------------------------------------


@given(project_ids)
def test_project_ids_by_gcp_rules_are_accepted(project):
    assert vertex.check_project_id(project) == project


@given(project_ids, st.sampled_from(["example.com", "corp.example.co.uk", "a1.io"]))
def test_domain_scoped_project_ids_are_accepted(project, domain):
    vertex.check_project_id(f"{domain}:{project}")


@given(st.text(max_size=40))
def test_what_is_accepted_keeps_gcp_rules(text):
    """Checked with plain string tests, independently of the module's regular expressions."""
    try:
        vertex.check_project_id(text)
    except InvalidValueError as exc:
        assert "6-30 lowercase letters" in str(exc)
        return
    if text.isdigit():
        assert not text.startswith("0") and len(text) <= 20  # a project number
        return
    project = text.rsplit(":", 1)[-1]
    assert 6 <= len(project) <= 30
    assert project[0] in string.ascii_lowercase and project[-1] != "-"
    assert set(project) <= set(PROJECT_ID_CHARS)


@pytest.mark.parametrize(
    "bad",
    [
        "my-project\n",
        "bad project!",
        "proj",
        "My-Project",
        "my-project-",
        "1project",
        "a" * 31,
        ":my-project",
        "example:my-project",
        "example.com:",
        "0123",
        "",
        None,
    ],
)
def test_malformed_project_ids_are_refused(bad):
    with pytest.raises(InvalidValueError, match="Google Cloud project ID"):
        vertex.check_project_id(bad)


# -- regions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("region", sorted(vertex.VERTEX_REGIONS))
def test_every_vertex_region_is_accepted_and_only_whole(region):
    assert vertex.check_region(region) == region
    for bad in (f"{region}\n", f" {region}", region.upper()):
        with pytest.raises(InvalidValueError):
            vertex.check_region(bad)


def test_an_unknown_region_names_the_list_a_close_match_and_the_way_to_add_one(monkeypatch):
    monkeypatch.delenv(vertex.EXTRA_REGIONS_ENV, raising=False)
    with pytest.raises(InvalidValueError) as info:
        vertex.check_region("us-centrl1")
    text = str(info.value)
    assert "did you mean 'us-central1'" in text
    assert vertex.EXTRA_REGIONS_ENV in text
    assert "\n" not in text and len(text) < 300  # one line, not every region
    assert "asia-northeast3" not in text
    with pytest.raises(InvalidValueError, match=r"\(e\.g\. us-central1, europe-west4") as info:
        vertex.check_region("nowhere")
    assert len(str(info.value)) < 300
    assert "global" not in vertex.VERTEX_REGIONS  # runs no CustomJobs


def test_extra_regions_are_read_at_call_time(monkeypatch):
    with pytest.raises(InvalidValueError):
        vertex.check_region("mars-central9")
    monkeypatch.setenv(vertex.EXTRA_REGIONS_ENV, "mars-central9")
    assert vertex.check_region("mars-central9") == "mars-central9"


# -- nesting, text, names --------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@given(json_values)
def test_nesting_depth_of_objects_and_of_their_json_text_agree(value):
    if not isinstance(value, str):  # a str is read as JSON text (documented), not as a leaf
        assert vertex.values.nesting_depth(value, 1000) == _depth(value)
    assert vertex.values.nesting_depth(json.dumps(value), 1000) == _depth(value)


@pytest.mark.parametrize("depth", [21, 5000, 100_000])
def test_deep_values_are_refused_without_recursion(depth):
    text = "[" * depth + "]" * depth
    with pytest.raises(InvalidValueError, match="more than 20 levels"):
        vertex.loads_bounded(text)
    value: list = []
    for _ in range(depth):
        value = [value]
    with pytest.raises(InvalidValueError, match="more than 20 levels"):
        vertex.check_nesting(value)


def test_brackets_inside_json_strings_do_not_count():
    assert vertex.loads_bounded(json.dumps(["[" * 50, {"k": "{" * 50}])) == [
        "[" * 50,
        {"k": "{" * 50},
    ]


def test_a_key_twice_is_refused_in_a_components_json_as_in_a_param():
    """One pipeline parameter, one meaning: a task read the last value, `--param` refused it."""
    from kfp_spot.pipelines import catalog, local

    text = '{"mse": "<=0.5", "mse": ">=0.1"}'
    with pytest.raises(InvalidValueError) as component:
        vertex.loads_bounded(text)
    pipeline = local.load(catalog.pipeline_path("spot_training"))
    with pytest.raises(local.LocalRunError) as param:
        local.parse_arguments(pipeline, {"thresholds": text})
    assert str(component.value) in str(param.value)
    assert str(component.value).startswith("""key 'mse' is given twice ("<=0.5" and ">=0.1")""")


def test_text_must_be_encodable():
    vertex.check_text({"ok": ["fine", "ünïcode ✓"]})
    for bad in ("\ud800", ["a", "\udfff"], {"\ud800": "x"}):
        with pytest.raises(InvalidValueError, match="UTF-8"):
            vertex.check_text(bad)


@pytest.mark.parametrize("name", ["trainer.task", "a", "_x.y_2"])
def test_module_names(name):
    assert vertex.is_module_name(name)
    assert not vertex.is_module_name(name + "\n")


@pytest.mark.parametrize("name", ["trainer/task.py", "1x", "a..b", "a.", "", None])
def test_not_module_names(name):
    assert not vertex.is_module_name(name)


def test_env_names_and_labels_are_matched_whole():
    assert vertex.is_env_name("SEED") and not vertex.is_env_name("SEED\n")
    vertex.check_label("team", "ml-platform_1")
    for key, value in (("team\n", "x"), ("team", "x\n"), ("Team", "x"), ("t", "A")):
        with pytest.raises(InvalidValueError):
            vertex.check_label(key, value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("équipe", "données"), ("学習", "機械学習"), ("ß", "ñ-1_٣"), ("k" * 63, "é" * 63), ("a", "")],
)
def test_labels_take_international_lowercase_letters_as_google_cloud_does(key, value):
    """Vertex AI: "International characters are allowed" (Google Cloud's label rules)."""
    vertex.check_label(key, value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Équipe", "x"),  # an uppercase letter, in any script
        ("équipe", "DONNÉES"),
        ("1k", "x"),  # a key starts with a letter
        ("_k", "x"),
        ("é" * 64, "x"),  # at most 63 code points
        ("k", "é" * 64),
        ("k", "a b"),
        ("k", "a.b"),
        ("k", "🚀"),  # a symbol, not a letter
        ("", "x"),
    ],
)
def test_labels_refused_by_google_cloud_are_refused(key, value):
    with pytest.raises(InvalidValueError, match="is invalid"):
        vertex.check_label(key, value)


# -- one rule, one home ----------------------------------------------------------------------


def test_no_pattern_in_kfp_spot_is_matched_by_its_start_only():
    """A ``$``-anchored pattern used with ``match`` lets a trailing newline through: checks use
    ``fullmatch``. Prefix matches of patterns without ``$`` (log parsing, tokenizers) are fine."""
    offenders = []
    for path in sorted(KFP_SPOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        anchored = _dollar_patterns(tree)
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "match"
            ):
                continue
            receiver = node.func.value
            if _is_re(receiver):
                first = node.args[0] if node.args else None
                bad = isinstance(first, ast.Constant) and _ends_with_dollar(first.value)
                bad = bad or (isinstance(first, ast.Name) and first.id in anchored)
            else:
                bad = isinstance(receiver, ast.Name) and receiver.id in anchored
            if bad:
                offenders.append(f"{path.relative_to(KFP_SPOT.parent)}:{node.lineno}")
    assert offenders == []


def _ends_with_dollar(value: object) -> bool:
    return isinstance(value, str) and value.endswith("$") and not value.endswith("\\$")


def _dollar_patterns(tree: ast.AST) -> set[str]:
    """Names bound to ``re.compile("...$")`` (or a ``$``-ended string) anywhere in the module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(value, ast.Call) and _is_re_call(value, "compile") and value.args:
                value = value.args[0]
            if (
                isinstance(target, ast.Name)
                and isinstance(value, ast.Constant)
                and _ends_with_dollar(value.value)
            ):
                names.add(target.id)
    return names


def _is_re_call(node: ast.Call, attr: str) -> bool:
    return (
        isinstance(node.func, ast.Attribute) and node.func.attr == attr and _is_re(node.func.value)
    )


def _is_re(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "re"


def test_vertex_limits_have_one_home():
    """The package-URI limit and the module-name rule are imported, never written again."""
    from kfp_spot import packaging
    from kfp_spot.packaging import sources

    assert packaging.MAX_PACKAGE_URIS is vertex.MAX_PACKAGE_URIS
    assert sources.is_module_name("trainer.task") and not sources.is_module_name("trainer.task\n")
    assert not sources.is_module_name("trainer.class")  # packaging adds: importable by `import`
    for needle in ("MAX_PACKAGE_URIS = ", "[A-Za-z_][A-Za-z0-9_]*"):
        copies = [
            str(p.relative_to(KFP_SPOT.parent))
            for p in KFP_SPOT.rglob("*.py")
            if needle in p.read_text()
        ]
        assert copies == ["kfp_spot/vertex/values.py"], needle


# -- labels: one rule, one message, for every resource ------------------------------------------


def _label_refusals(labels):
    """What a CustomJob, a PipelineJob submission, a Model and an Endpoint say of ``labels``."""
    from google.cloud.aiplatform_v1.types import CustomJob, Endpoint, Model

    from kfp_spot.pipelines import catalog
    from kfp_spot.vertex import model_endpoint, pipeline_job

    said = []
    with pytest.raises(vertex.InvalidJobSpecError) as custom:  # labels come before the pools
        vertex.validate_custom_job(CustomJob(display_name="train", labels=labels))
    said.append(str(custom.value))
    with pytest.raises(pipeline_job.SubmissionError) as submission:
        pipeline_job.prepare_submission(
            catalog.pipeline_path("evaluate_checkpoint"),
            project="my-proj",
            location="us-central1",
            labels=labels,
        )
    said.append(str(submission.value))
    for check, resource in (
        (model_endpoint.check_model, Model(display_name="m", labels=labels)),
        (model_endpoint.check_endpoint, Endpoint(display_name="e", labels=labels)),
    ):
        with pytest.raises(vertex.InvalidFieldError) as refused:
            check(resource, *([vertex.EMULATOR] if check is model_endpoint.check_model else []))
        said.append(str(refused.value).split(".", 1)[1])  # model.labels... -> labels...
    return said


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({f"k{i}": "v" for i in range(65)}, "labels: has 65 labels; at most 64"),
        ({"Team": "ml"}, "labels.Team: label key 'Team' is invalid: keys start with a lowercase"),
    ],
)
def test_every_resource_refuses_bad_labels_in_the_same_words(labels, message):
    """A PipelineJob's labels had their own count and message ('65 labels; a PipelineJob takes
    at most 64'), beside the CustomJob's and the Model's and Endpoint's."""
    for said in _label_refusals(labels):
        assert said.startswith(message), said
