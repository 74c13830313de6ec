"""Every kfp-spot component starts the KFP executor with `exec`, and KFP's command still has the
shape that transformation expects (this fails first when a KFP upgrade changes it)."""

import pytest
from kfp import dsl

from kfp_spot.components import factory
from kfp_spot.pipelines import catalog


def test_kfp_builds_lightweight_components_with_the_script_kfp_spot_transforms():
    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def probe(x: int) -> int:
        return x

    command = probe.component_spec.implementation.container.command
    assert command[:2] == ["sh", "-ec"] and len(command) == 4
    assert command[2] == factory.KFP_SCRIPT, (
        "KFP changed its lightweight-component command: update components/factory.py so the "
        "executor still replaces the shell (exec), then recompile"
    )


def test_exec_script_differs_from_kfps_only_by_exec():
    assert factory.EXEC_SCRIPT.replace("exec python3", "python3", 1) == factory.KFP_SCRIPT
    assert factory.EXEC_SCRIPT.count("exec ") == 1


@pytest.mark.parametrize("entry", catalog.COMPONENTS, ids=[e.name for e in catalog.COMPONENTS])
def test_every_component_execs_the_executor(entry):
    component = entry.load()
    container = component.component_spec.implementation.container
    assert container.command[:3] == ["sh", "-ec", factory.EXEC_SCRIPT]
    # The committed YAML carries the same command (the stale-YAML test checks the rest).
    assert "_KFP_RUNTIME=true exec python3 -m kfp.dsl.executor_main" in (
        entry.default_path().read_text()
    )


def test_an_unknown_command_is_refused_loudly():
    with pytest.raises(factory.UnexpectedKfpCommandError, match="cannot make the task receive"):
        factory.exec_executor(["sh", "-c", "python3 -m kfp.dsl.executor_main", "src"])


def test_a_factory_component_runs_under_kfp_local(tmp_path):
    from kfp import local

    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))

    @factory.component
    def double(x: int) -> int:
        return 2 * x

    assert double(x=21).output == 42
