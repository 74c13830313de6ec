"""A template parsed once is the component KFP's own loader makes of the same file."""

import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kfp import compiler, components, dsl

from kfp_spot import yamldocs
from kfp_spot.pipelines import catalog, local
from kfp_spot.pipelines.template_component import TemplateComponent, header_description

ALL = catalog.COMPONENTS + catalog.PIPELINES


@pytest.mark.parametrize("entry", ALL, ids=[e.name for e in ALL])
def test_loaded_template_equals_kfps_load_of_the_same_file(entry):
    path = entry.default_path()
    ours = local.load(path)
    kfps = components.load_component_from_file(str(path))
    assert isinstance(ours, TemplateComponent)
    if kfps.component_spec.inputs is None:  # local.load gives {} for no parameters
        kfps.component_spec.inputs = {}
    assert ours.component_spec == kfps.component_spec
    assert ours.component_spec.description  # every template of ours has one
    assert ours.pipeline_spec == kfps.pipeline_spec
    assert ours.component_yaml == kfps.component_yaml


def test_each_read_of_pipeline_spec_is_a_new_message():
    ours = local.load(catalog.pipeline_path("spot_training"))
    first = ours.pipeline_spec
    first.pipeline_info.name = "changed-by-a-caller"
    assert ours.pipeline_spec.pipeline_info.name == "spot-training"


def test_a_multi_line_description_and_a_platform_spec_load_as_kfp_loads_them(tmp_path):
    @dsl.component(base_image="python:3.11")
    def step(x: int) -> int:
        return x

    @dsl.pipeline(name="two-docs")
    def two_docs(x: int = 1):
        """First line of the description.

        A second paragraph, so the compiler continues the header.
        """
        task = step(x=x)
        task.set_caching_options(False)

    path = tmp_path / "two.yaml"
    compiler.Compiler().compile(two_docs, str(path))
    # A platform spec as a second document (what kfp-kubernetes adds to a compiled pipeline).
    platform = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {}}}}}
    path.write_text(path.read_text() + "---\n" + yaml.safe_dump(platform))
    ours = local.load(path)
    kfps = components.load_component_from_file(str(path))
    assert "\n" in header_description(path.read_text())
    assert ours.component_spec == kfps.component_spec
    assert ours.platform_spec == kfps.platform_spec
    assert ours.pipeline_spec == kfps.pipeline_spec


def test_three_documents_are_refused_as_kfp_refuses_them(tmp_path):
    path = tmp_path / "three.yaml"
    text = catalog.pipeline_path("spot_training").read_text()
    path.write_text(text + "---\n{}\n---\n{}\n")
    with pytest.raises(local.LocalRunError, match="Expected one or two YAML documents"):
        local.load(path)


def test_each_caller_gets_its_own_copy_of_a_template_parsed_once():
    text = catalog.pipeline_path("spot_training").read_text()
    first = yamldocs.documents(text)
    first[0]["pipelineInfo"]["name"] = "changed-by-a-caller"
    second = yamldocs.documents(text)
    assert second[0]["pipelineInfo"]["name"] == "spot-training"
    assert second == list(yaml.safe_load_all(text))


def test_a_bad_text_raises_on_every_read():
    for _ in range(2):
        with pytest.raises(yaml.YAMLError):
            yamldocs.documents("a: [1\n")


def test_a_tab_after_a_key_is_refused_as_kfp_refuses_it(tmp_path):
    path = tmp_path / "tab.yaml"
    path.write_text("pipelineInfo: {name: x}\nroot:\t{dag: {tasks: {}}}\n")
    with pytest.raises(local.LocalRunError, match="not YAML"):
        local.load(path)


def _pure(text):
    return list(yaml.load_all(text, Loader=yaml.SafeLoader))


def _outcome(read, text):
    try:
        return ("ok", read(text))
    except yaml.YAMLError as exc:
        return ("error", type(exc).__name__)


# YAML's syntax: what a hand-edited or damaged template might hold. libyaml reads some of these
# texts differently ("!", "|#", "[a:,]", a tab after "key:"), which is why it is not used.
_YAML_CHARS = st.sampled_from(list(" \n\t\r:-?[]{},'\"#|>&*!%@`.\\~0123456789abexyzTFN_=+/é"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_YAML_CHARS, max_size=60).map("".join))
def test_any_text_reads_as_pyyamls_safe_load_all_reads_it(text):
    assert _outcome(yamldocs.documents, text) == _outcome(_pure, text)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=12)
        | st.binary(max_size=6)
        | st.dates(),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_any_dumped_value_reads_back_as_pyyaml_reads_it(value):
    text = yaml.safe_dump(value)
    assert _outcome(yamldocs.documents, text) == _outcome(_pure, text)


def test_a_yaml_error_names_the_template_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("a: [1\n")
    with pytest.raises(
        local.LocalRunError, match=r'not YAML .*"' + re.escape(str(path)) + '", line'
    ):
        local.load(path)


_REFUSE_AND_LIST_KFP = (
    "import sys\n"
    "from kfp_spot.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    assert exc.code == 2, exc.code\n"
    "print(sorted(m for m in sys.modules if m == 'kfp' or m.startswith('kfp.')))\n"
)


@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_bad_template_is_refused_before_kfp_is_imported(tmp_path, command):
    # Importing KFP loads its client and the Kubernetes client (~0.3-0.4 s of CPU); refusing a
    # broken template needs neither.
    path = tmp_path / "broken.yaml"
    path.write_text("a: [1\n")
    args = ["run", "--template", str(path)] if command == "run" else ["submit", str(path)]
    args += ["--run-dir", str(tmp_path / "run")] if command == "run" else ["--project", "p-1"]
    proc = subprocess.run(
        [sys.executable, "-c", _REFUSE_AND_LIST_KFP, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not YAML" in proc.stderr
    assert proc.stdout.strip() == "[]"
