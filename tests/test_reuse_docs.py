"""What the docs tell a team reusing single components: true to the committed YAMLs.

The README's "Using the components in your own pipeline" snippets are compiled and submitted
(dry run) as written, and every input and output of every committed component YAML is described
in it, as GCPC's component YAMLs describe theirs.
"""

import re
from pathlib import Path

import pytest
import yaml
from kfp import compiler
from kfp.dsl import graph_component

from kfp_spot import RUNTIME_IMAGE, __version__
from kfp_spot.image import ImageRecord, remember
from kfp_spot.pipelines import catalog

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Using the components in your own pipeline"


def _snippets() -> list[str]:
    """The Python code blocks of the README's section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def team_dir(tmp_path, monkeypatch, no_google_login):
    """A team's folder holding the committed YAMLs as `components/`, no Google login; this
    kfp-spot's runtime image counts as pushed (what `kfp-spot image push` records)."""
    (tmp_path / "components").symlink_to(ROOT / "components")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    remember(ImageRecord(RUNTIME_IMAGE, "pushed", __version__, "sha256:1d"))
    return tmp_path


def test_the_readmes_own_pipeline_snippets_compile_and_submit_as_written(
    team_dir, monkeypatch, capfd
):
    from kfp_spot.pipelines import vertex

    sent = []

    def submit(template, **arguments):  # what a login would send: the dry run's request
        sent.append(vertex.dry_run(template, **arguments))
        return "projects/team-proj/locations/europe-west4/pipelineJobs/1"

    monkeypatch.setattr(vertex, "submit", submit)
    blocks = _snippets()
    assert len(blocks) == 3, "the section's snippets changed: update this test"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # the README's own code
    compiled = namespace["my_pipeline"]  # the first snippet's: it does not compile it itself
    compiler.Compiler().compile(compiled, str(team_dir / "my_pipeline.yaml"))
    assert isinstance(compiled, graph_component.GraphComponent)
    spec = yaml.safe_load((team_dir / "team_finetune.yaml").read_text())
    assert {"launch-spot-job", "importer", "importer-2"} <= set(spec["root"]["dag"]["tasks"])
    request = namespace["request"]
    assert request["url"].startswith(
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/team-proj/locations/"
        "europe-west4/pipelineJobs?pipelineJobId=team-finetune-"
    )
    assert request["body"]["pipelineSpec"]["taskCaching"]["launch-spot-job"] is False
    assert sent and sent[0]["body"]["runtimeConfig"]["parameterValues"] == {
        "gcp_project": "team-proj"
    }
    warned = [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]
    # Nothing but the default executor image's notice (every image in the table is past its
    # documented end; docs/packaging.md): no task left cacheable, unchecked or elsewhere.
    assert all("executor image" in line for line in warned), warned


@pytest.mark.parametrize("entry", catalog.COMPONENTS, ids=[e.name for e in catalog.COMPONENTS])
def test_every_input_and_output_of_a_component_yaml_is_described(entry):
    """A team loading a YAML reads each input's and output's meaning in it: the outputs were
    bare (KFP takes their descriptions from a `Returns:` section, which listed none of them)."""
    spec = yaml.safe_load(entry.default_path().read_text())
    (component,) = spec["components"].values()
    bare = [
        f"{kind} {name}"
        for kind in ("inputDefinitions", "outputDefinitions")
        for group in (component.get(kind) or {}).values()
        for name, definition in group.items()
        if not (definition.get("description") or "").strip()
    ]
    assert bare == []
