"""Reading YAML documents: compiled pipeline and component specs, registry uploads.

PyYAML's pure-Python parser takes ~0.09 s of CPU for a compiled pipeline of ~55 KB; libyaml's C
parser, which PyYAML's wheels include, takes ~0.006 s and builds the same safe types (plain
mappings, lists, strings, numbers, booleans, null). Every reader here uses the C parser where
PyYAML has it, and the pure-Python one where it does not (a PyYAML built without libyaml).
"""

from __future__ import annotations

from typing import IO, Any


def first_document(source: str | bytes | IO[str] | IO[bytes]) -> Any:
    """The first YAML document of ``source`` with safe types only; ``None`` for an empty one.

    Later documents are not read (a compiled spec may carry a platform spec second).

    Raises:
        yaml.YAMLError: ``source`` is not YAML up to the end of its first document.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return next(yaml.load_all(source, Loader=loader), None)
