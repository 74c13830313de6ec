"""A component's parameter inputs as KFP hands them over, read into typed values.

KFP passes what a pipeline author wrote, and not always in the declared type: kfp.local hands
integers back as floats, lists and dicts arrive as JSON text from YAML or the CLI, an optional
input left out is None or "". Every component entry point (``launch_spot_job``,
``deploy_spot_endpoint``) reads its inputs through one :class:`InputReader`, so each input kind is
checked the same way everywhere: finite numbers, whole integers, real booleans, JSON parsed with
bounded nesting (deep text fails in one line, not with a RecursionError), and every error is the
component's own typed error naming the input.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from kfp_spot.vertex.values import (
    InvalidFieldError,
    InvalidValueError,
    check_nesting,
    loads_bounded,
    show,
)

_T = TypeVar("_T")


def check_input(
    error: Callable[[str, str], Exception],
    name: str,
    check: Callable[..., _T],
    *args: Any,
    **kwargs: Any,
) -> _T:
    """``check(*args, **kwargs)``, a rule of :mod:`kfp_spot.validation`.

    Its refusal is raised as ``error(name, reason)``: the component's own error, naming the input.
    """
    try:
        return check(*args, **kwargs)
    except InvalidValueError as exc:
        raise error(name, str(exc)) from None


@contextlib.contextmanager
def inputs_of(error: Callable[[str, str], Exception]) -> Iterator[None]:
    """Within the block, a field the Vertex floor refuses is raised as ``error(field, reason)``.

    The floor (:mod:`kfp_spot.vertex`) speaks of request fields in its neutral
    :class:`~kfp_spot.vertex.values.InvalidFieldError`; a component names its own input instead.
    """
    try:
        yield
    except InvalidFieldError as exc:
        raise error(exc.field, exc.reason) from None


def dataclass_defaults(cls: type, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The defaults of a dataclass's fields (of ``names`` only, when given), as inputs carry them.

    Enums become their values (an input holds the name), tuples lists and mappings dicts (as KFP
    passes them). Fields without a default are left out.
    """
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if names is not None and f.name not in names:
            continue
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


class InputReader:
    """Typed reads of one call's inputs, with the component's defaults and error type.

    Args:
        inputs: the inputs as the component received them.
        defaults: each optional input's default (what a missing, None or "" input means).
        error: the component's error type, called as ``error(input_name, reason)``.
    """

    def __init__(
        self,
        inputs: Mapping[str, Any],
        defaults: Mapping[str, Any],
        error: Callable[[str, str], Exception],
    ) -> None:
        self.inputs = inputs
        self.defaults = defaults
        self.error = error

    def given(self, name: str) -> Any:
        """The input's value, or (a copy of) its default when it is missing, None or ''."""
        value = self.inputs.get(name)
        if value is None or value == "":
            return copy.deepcopy(self.defaults.get(name))
        return value

    def checked(self, name: str, check: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``check(*args)`` (a rule of :mod:`kfp_spot.validation`), its error naming ``name``."""
        return check_input(self.error, name, check, *args, **kwargs)

    def text(self, name: str, *, empty_is_default: bool = True) -> str:
        """A string input ("" when it has no default).

        Args:
            name: the input.
            empty_is_default: whether "" means the default (else "" stays "", for inputs where
                an empty value is a mistake the caller reports).
        """
        value = self.inputs.get(name)
        if value == "" and not empty_is_default:
            return ""
        value = self.given(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(name, f"expected a string, got {show(value)}")
        return value

    def number(self, name: str, *, minimum: float | None = None) -> float:
        """A finite number (at least ``minimum`` when given)."""
        return self.as_number(name, self.given(name), minimum=minimum)

    def as_number(self, name: str, value: Any, *, minimum: float | None = None) -> float:
        """``value`` (part of input ``name``) as a finite number."""
        if isinstance(value, bool):
            raise self.error(name, f"expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = math.nan
        if not math.isfinite(number):
            raise self.error(name, f"expected a finite number, got {show(value)}")
        if minimum is not None and number < minimum:
            raise self.error(name, f"expected a number >= {minimum:g}, got {show(value)}")
        return number

    def integer(self, name: str) -> int:
        """A whole number (``3.0`` counts: kfp.local hands integers back as floats)."""
        return self.as_integer(name, self.given(name))

    def as_integer(self, name: str, value: Any) -> int:
        """``value`` (part of input ``name``) as a whole number."""
        number = self.as_number(name, value)
        if number != int(number):
            raise self.error(name, f"expected an integer, got {show(value)}")
        return int(number)

    def boolean(self, name: str) -> bool:
        """True or false (also the JSON/CLI text ``"true"`` / ``"false"``)."""
        value = self.given(name)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise self.error(name, f"expected true or false, got {show(value)}")

    def json_value(self, name: str, kind: type[_T]) -> _T:
        """A list or dict, given as one or as its JSON text; nesting is bounded either way."""
        return self.as_json(name, self.given(name), kind)

    def as_json(self, name: str, value: Any, kind: type[_T]) -> _T:
        """``value`` (part of input ``name``) as a list or dict, given as one or as its JSON text.

        kfp.local hands a list or dict over as JSON text wherever it passes through a string
        (importer metadata, a YAML component's parameters); any other text is an error naming
        ``name``, never split or guessed at.
        """
        if value is None:
            return kind()
        if isinstance(value, str):
            value = self.checked(name, loads_bounded, value)
        else:
            self.checked(name, check_nesting, value)
        if not isinstance(value, kind):
            raise self.error(
                name, f"expected a {kind.__name__} (or its JSON), got {type(value).__name__}"
            )
        return value

    def strings(self, name: str) -> list[str]:
        """A list of strings (or its JSON text)."""
        return self.as_strings(name, self.given(name))

    def as_strings(self, name: str, value: Any) -> list[str]:
        """``value`` (part of input ``name``) as a list of strings (or its JSON text)."""
        values: list[Any] = self.as_json(name, value, list)
        for item in values:
            if not isinstance(item, str):
                raise self.error(name, f"expected a list of strings, got an item {show(item)}")
        return values

    def string_map(self, name: str) -> dict[str, str]:
        """A mapping of strings to strings (or its JSON text)."""
        values: dict[Any, Any] = self.json_value(name, dict)
        for key, item in values.items():
            if not isinstance(key, str) or not isinstance(item, str):
                raise self.error(
                    name, f"expected a mapping of strings to strings, got {show({key: item})}"
                )
        return values
