"""Reading a YAML document: the same values whichever of PyYAML's parsers reads it."""

from __future__ import annotations

import io

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.yamldoc import first_document
from pipelines import catalog

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
)
documents = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(documents)
def test_any_safe_document_reads_as_the_pure_python_parser_reads_it(value):
    text = yaml.safe_dump(value, allow_unicode=True)
    pure = yaml.safe_load(text)  # not always `value`: PyYAML's dumper folds some line breaks
    assert first_document(text) == pure
    assert first_document(text.encode()) == pure
    assert first_document(io.StringIO(text)) == pure


@pytest.mark.parametrize("entry", catalog.COMPONENTS + catalog.PIPELINES, ids=lambda e: e.name)
def test_every_committed_spec_reads_as_the_pure_python_parser_reads_it(entry):
    text = entry.default_path().read_text()
    assert first_document(text) == yaml.safe_load(text)


def test_only_the_first_document_is_read_and_an_empty_one_is_none():
    assert first_document("a: 1\n---\n[unclosed\n") == {"a": 1}
    assert first_document("") is None


def test_unsafe_tags_and_bad_yaml_are_refused_as_pyyaml_refuses_them():
    with pytest.raises(yaml.YAMLError):
        first_document("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(yaml.YAMLError) as caught:
        first_document("a: [1\n")
    assert caught.value.problem_mark is not None  # where it broke, for the one-line error
