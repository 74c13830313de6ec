"""What counts as a number a trainer gives: NumPy's scalars too, never a bool.

A training loop's numbers are often NumPy's (``np.int64`` from a config array or a step counter,
``np.float32`` from a framework's metric), which are no ``int`` or ``float`` subclass but register
as :class:`numbers.Integral` and :class:`numbers.Real`. Every check of a step
(:func:`kfp_spot.checkpoints.paths.check_step`), a count, a number of seconds or a ranked metric
reads a value through these two, so one rule holds wherever a number is given. The plain ``int``
and ``float`` of most loops import nothing.
"""

from __future__ import annotations

__all__ = ["real_number", "whole_number"]


def whole_number(value: object) -> int | None:
    """``value`` as an ``int`` when it is a whole number (``int``, ``numpy.int64``); else None.

    A bool (``True``, ``numpy.bool_``), a float, a string or an array is no whole number.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    import numbers  # only here: see the module's docstring

    return int(value) if isinstance(value, numbers.Integral) else None


def real_number(value: object) -> float | None:
    """``value`` as a ``float`` when it is a real number (``int``, ``numpy.float32``); else None.

    Not checked for finiteness (each caller says what it needs). A bool, a string, a complex
    number or an array is no real number.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    import numbers  # only here: see the module's docstring

    return float(value) if isinstance(value, numbers.Real) else None
