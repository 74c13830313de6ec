"""State adapters: how one value of a training state becomes checkpoint bytes and back.

A training state is a mapping of names to values. Each value is stored as one file whose adapter
is recorded in the manifest, so a restore decodes it with the adapter that wrote it. Frameworks
are imported lazily: an adapter for a library that is not installed never imports it, and a value
can only be of a library's type if that library is already imported.

Built in, tried in this order (their file suffixes are the checkpoint format's,
:data:`kfp_spot.checkpoints.BUILTIN_SUFFIXES`):

========================  ===========  ======================================================
adapter                   file suffix  values
========================  ===========  ======================================================
``bytes``                 ``.bin``     ``bytes``, ``bytearray``, ``memoryview`` (raw files)
``numpy``                 ``.npy``     ``numpy.ndarray`` (no pickled objects)
``numpy-scalar``          ``.npy``     a NumPy scalar (``numpy.float32(1)``), type kept
``numpy-dict``            ``.npz``     a mapping of str to ``numpy.ndarray`` (no pickles)
``numpy-generator``       ``.json``    ``numpy.random.Generator`` (its bit generator state)
``numpy-random-state``    ``.json``    ``numpy.random.RandomState``
``python-random``         ``.json``    ``random.Random``
``torch``                 ``.pt``/``.safetensors``  a torch tensor or a mapping of str to
                                       tensors (a ``state_dict()``, safetensors when
                                       installed), or dicts, lists and tuples of tensors
                                       and numbers (an optimizer's ``state_dict()``); read
                                       with safetensors
                                       or ``torch.load(weights_only=True)``, never a pickle
``sklearn``               ``.pkl``     a scikit-learn estimator (pickle: off unless the
                                       reader passes ``allow_pickle=True``, since unpickling
                                       runs code named by the file)
``json``                  ``.json``    anything ``json`` round-trips exactly: None, bool,
                                       int, float, str, and lists/dicts of those
========================  ===========  ======================================================

Which decoders may run is the reader's choice, never the checkpoint's: :func:`allowed` gives the
adapters a reader accepts (pickle-based ones only when it opts in), and a step whose manifest names
another one is invalid before any of its bytes are decoded.

Why one module: it is a table: each adapter is a few small functions, and the order they are tried
in is the module's order; one file keeps the table readable in one place.
"""

from __future__ import annotations

import collections
import io
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kfp_spot.checkpoints.manifest import MANIFEST_NAME
from kfp_spot.checkpoints.state import BUILTIN_SUFFIXES, STATE_KEY_RULE, is_state_key

Buffer = bytes | bytearray | memoryview
"""What decoders receive: a bytes-like object (built-in decoders get writable buffers)."""


class StateEncodingError(TypeError):
    """A state value has no adapter, or its bytes cannot be decoded by the adapter named."""


class _Refused(StateEncodingError):
    """A built-in adapter's refusal of part of a value: ``where`` below the state key, and why.

    :func:`encode_state` names the item as ``state['key']<where>``.
    """

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where} {why}".strip())
        self.where = where
        self.why = why


class Chunks(tuple[Buffer, ...]):
    """A file's content as consecutive buffers, written one after the other without joining.

    The NumPy adapter encodes an array as its ``.npy`` header plus a view of the array's own
    memory, so a synchronous save writes the array from where it lives.
    """

    def __bytes__(self) -> bytes:
        return b"".join(bytes(memoryview(part).cast("B")) for part in self)

    @property
    def nbytes(self) -> int:
        """The total size in bytes."""
        return sum(memoryview(part).nbytes for part in self)


# What decoders may raise on bytes that verified but do not decode (a forged or buggy step).
_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    EOFError,
    OverflowError,
    AttributeError,
    RuntimeError,
    MemoryError,
    RecursionError,
    ArithmeticError,
)
# Error classes of modules decoders use, looked up once those modules are loaded (never imported
# here: importing zipfile or pickle for nothing would slow `import kfp_spot.trainer`).
_MODULE_ERRORS = (
    ("zipfile", "BadZipFile"),
    ("pickle", "UnpicklingError"),
    ("struct", "error"),
    ("safetensors", "SafetensorError"),
)


def _decode_errors() -> tuple[type[BaseException], ...]:
    extra = []
    for module, name in _MODULE_ERRORS:
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            extra.append(kind)
    return (*_DECODE_ERRORS, *extra)


@dataclass(frozen=True)
class Adapter:
    """How to store one kind of value.

    Attributes:
        name: recorded in the manifest; restore looks the adapter up by it.
        suffix: the file name suffix (with the dot).
        matches: whether a value is of this kind (must not import optional libraries).
        encode: value -> bytes-like or :class:`Chunks` (a snapshot: later changes to the value
            must not show).
        decode: bytes -> value. Built-in adapters get a writable bytes-like buffer they may keep
            and use in place; adapters added with :func:`register` get ``bytes``.
        pickle: whether decoding may run code named by the bytes (``pickle.loads`` and the
            like). Readers allow such adapters only with ``allow_pickle=True``.
    """

    name: str
    suffix: str
    matches: Callable[[Any], bool]
    encode: Callable[[Any], Buffer | Chunks]
    decode: Callable[[Any], Any]
    pickle: bool = False


def _module_loaded(name: str) -> Any:
    return sys.modules.get(name)


# -- bytes -------------------------------------------------------------------------------------
def _is_bytes(value: Any) -> bool:
    # Not numpy.bytes_ (a bytes subclass): the numpy-scalar adapter gives its type back.
    return isinstance(value, (bytes, bytearray, memoryview)) and not _is_numpy_scalar(value)


def _encode_bytes(value: Any) -> Buffer:
    # bytes are immutable: written as they are; other buffers as a view of their own memory.
    if isinstance(value, bytes):
        return value
    view = memoryview(value)
    return view.cast("B") if view.c_contiguous else view.tobytes()


# -- numpy -------------------------------------------------------------------------------------
def _is_ndarray(value: Any) -> bool:
    np = _module_loaded("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _encode_ndarray(value: Any) -> Chunks:
    """The ``.npy`` format (readable by ``numpy.load``): its header, then the array's own memory.

    Nothing is copied for a contiguous array; a save that must snapshot (async) copies it.
    """
    _check_array("", value)
    return _npy_parts(value)


def _npy_parts(value: Any) -> Chunks:
    """An array's ``.npy`` file as its header and a view of its data (an array checked)."""
    import numpy as np

    if not (value.flags.c_contiguous or value.flags.f_contiguous):
        value = np.ascontiguousarray(value)
    header = io.BytesIO()
    fmt = np.lib.format
    info = fmt.header_data_from_array_1_0(value)
    try:
        fmt.write_array_header_1_0(header, info)
    except ValueError:  # a header too long for format 1.0
        fmt.write_array_header_2_0(header, info)
    if not value.nbytes:
        return Chunks((header.getvalue(),))
    # ravel(order="A") of a contiguous array is a view in its memory order: no copy.
    return Chunks((header.getvalue(), memoryview(value.ravel(order="A").view(np.uint8))))


def _check_array(where: str, value: Any) -> None:
    """Refuse an array whose ``.npy`` file would not give back the same value."""
    import numpy as np

    if value.dtype.hasobject:
        raise _Refused(
            where,
            "is a numpy array of Python objects, which cannot be checkpointed without pickle; "
            "store a numeric array or use the 'sklearn'/'bytes' adapters",
        )
    if value.dtype.kind == "V" and _npy_dtype(value.dtype) != value.dtype:
        # A dtype a library adds to NumPy (ml_dtypes' bfloat16, float8_*) has no .npy name: the
        # file records raw bytes ('|V2') and numpy.load gives back that, not the numbers.
        raise _Refused(
            where,
            f"is of dtype {value.dtype}, which a .npy file stores as raw bytes of dtype "
            f"{_npy_dtype(value.dtype)} and gives back as those; store value.astype(numpy."
            f"float32), or value.view(numpy.uint{8 * value.dtype.itemsize}) and view it back "
            f"as {value.dtype} after the restore",
        )
    kind = type(value)
    # A memmap is restored as the ndarray it maps; any other subclass would lose what it adds
    # (a masked array its mask, a numpy.matrix its `*` as a matrix product).
    if kind is not np.ndarray and kind is not np.memmap:
        raise _Refused(
            where,
            f"is a {kind.__module__}.{kind.__qualname__}, a subclass of numpy.ndarray that a "
            ".npy file would give back as a plain ndarray (a masked array loses its mask, a "
            "matrix its `*` product); store numpy.asarray(value) (and a mask under its own key)",
        )


def _npy_dtype(dtype: Any) -> Any:
    """The dtype a ``.npy`` file of an array of ``dtype`` gives back."""
    import warnings

    import numpy as np

    fmt = np.lib.format
    with warnings.catch_warnings():  # a dtype's metadata is not saved: encoding warns of it
        warnings.simplefilter("ignore", UserWarning)
        return fmt.descr_to_dtype(fmt.dtype_to_descr(dtype))


def _decode_ndarray(data: Buffer) -> Any:
    """Read ``.npy`` bytes; over a writable buffer the array uses its memory (no copy)."""
    import numpy as np

    fmt = np.lib.format
    # NumPy reads headers of at most 10000 bytes (max_header_size): 64 KiB holds any it takes.
    stream = io.BytesIO(memoryview(data)[: 1 << 16].tobytes())
    if fmt.read_magic(stream) == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(stream)
    else:
        shape, fortran, dtype = fmt.read_array_header_2_0(stream)
    if dtype.hasobject:
        raise ValueError("the array holds Python objects, which need pickle")
    count = math.prod(shape)  # Python ints: a forged shape cannot overflow
    if count * dtype.itemsize != memoryview(data).nbytes - stream.tell():
        raise ValueError(f"the .npy header's shape {shape} does not match the data size")
    if memoryview(data).readonly:
        data = bytearray(data)  # frombuffer over bytes would give a read-only array
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    return flat.reshape(shape, order="F" if fortran else "C")


def _is_numpy_scalar(value: Any) -> bool:
    np = _module_loaded("numpy")
    return np is not None and isinstance(value, np.generic) and not value.dtype.hasobject


def _encode_numpy_scalar(value: Any) -> Chunks:
    import numpy as np

    if isinstance(value, (np.str_, np.bytes_)) and value[-1:] in ("\0", b"\0"):
        # A string scalar read from an array drops its trailing NULs: b"a\0" would come back b"a".
        raise _Refused(
            "",
            f"is a numpy.{type(value).__name__} ending in NUL, which NumPy gives back without "
            "its trailing NULs; store it as a Python str or bytes",
        )
    return _encode_ndarray(np.asarray(value))


def _decode_numpy_scalar(data: Buffer) -> Any:
    return _decode_ndarray(data)[()]


def _is_ndarray_dict(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) and _is_ndarray(v) for k, v in value.items())
    )


_MAX_MEMBER_BYTES = 0xFFFF - len(".npy")
"""The longest key of a dict of arrays: a zip member's name is at most 65535 bytes."""


def _check_member_key(key: str) -> None:
    """Refuse a key of a dict of arrays that its ``.npz`` member name would not give back."""
    if "\0" in key:  # zipfile cuts a member's name at its first NUL when it reads it back
        raise _Refused(f"[{key!r}]", "is a key holding NUL, which an .npz name cannot hold")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise _Refused(
            f"[{key!r}]",
            "is a key that is not valid Unicode (a lone surrogate): an .npz name is UTF-8",
        ) from None
    if size > _MAX_MEMBER_BYTES:
        raise _Refused(
            f"[{key[:40]!r}...]",
            f"is a key of {size} bytes, over the {_MAX_MEMBER_BYTES} an .npz name holds",
        )


def _encode_ndarray_dict(value: Mapping[str, Any]) -> Chunks:
    for key, array in value.items():
        _check_member_key(key)
        _check_array(f"[{key!r}]", array)
    from kfp_spot.trainer import npzfile

    return Chunks(npzfile.encode(value, _npy_parts))


def _decode_ndarray_dict(data: Buffer) -> dict[str, Any]:
    """Each member ``<key>.npy`` by its exact name, in place over ``data`` where it can be."""
    from kfp_spot.trainer import npzfile

    return npzfile.decode(data, _decode_ndarray)


def _is_generator(value: Any) -> bool:
    np = _module_loaded("numpy")
    return np is not None and isinstance(value, np.random.Generator)


def _state_to_json(value: Any) -> Any:
    # Bit generator states are dicts of ints, with arrays for MT19937's key.
    import numpy as np

    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, dict):
        return {k: _state_to_json(v) for k, v in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    return value


def _state_from_json(value: Any) -> Any:
    import numpy as np

    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.asarray(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
        return {k: _state_from_json(v) for k, v in value.items()}
    return value


def _encode_generator(value: Any) -> bytes:
    return json.dumps(_state_to_json(value.bit_generator.state)).encode()


def _decode_generator(data: Buffer) -> Any:
    import numpy as np

    state = _state_from_json(json.loads(bytes(data)))
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _is_random_state(value: Any) -> bool:
    np = _module_loaded("numpy")
    return np is not None and isinstance(value, np.random.RandomState)


def _encode_random_state(value: Any) -> bytes:
    kind, keys, pos, has_gauss, cached = value.get_state(legacy=True)
    return json.dumps([kind, keys.tolist(), pos, has_gauss, cached]).encode()


def _decode_random_state(data: Buffer) -> Any:
    import numpy as np

    kind, keys, pos, has_gauss, cached = json.loads(bytes(data))
    out = np.random.RandomState()
    out.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    return out


# -- Python's random -----------------------------------------------------------------------------
def _is_python_random(value: Any) -> bool:
    random = _module_loaded("random")  # a Random exists only once its module is loaded
    return random is not None and isinstance(value, random.Random)


def _encode_python_random(value: Any) -> bytes:
    version, internal, gauss = value.getstate()
    return json.dumps([version, list(internal), gauss]).encode()


def _decode_python_random(data: Buffer) -> Any:
    import random

    version, internal, gauss = json.loads(bytes(data))
    out = random.Random()
    out.setstate((version, tuple(internal), gauss))
    return out


# -- torch -------------------------------------------------------------------------------------
_TORCH_LEAVES = (str, int, float, bool, type(None))


def _tensor_count(value: Any, tensor: type, depth: int = 0) -> int:
    """How many tensors a tree of dicts, lists and tuples holds.

    -1 when ``torch.load(..., weights_only=True)`` could not read it back (an object of another
    type, a tree too deep).
    """
    if isinstance(value, tensor):
        return 1
    if isinstance(value, _TORCH_LEAVES):
        return 0
    if depth > 32:
        return -1
    if type(value) in (list, tuple):
        items: Iterable[Any] = value
    elif type(value) in (dict, collections.OrderedDict):
        if not all(isinstance(k, (str, int)) for k in value):
            return -1
        items = value.values()
    else:
        return -1
    total = 0
    for item in items:
        count = _tensor_count(item, tensor, depth + 1)
        if count < 0:
            return -1
        total += count
    return total


def _is_torch(value: Any) -> bool:
    torch = _module_loaded("torch")
    if torch is None:
        return False
    if isinstance(value, torch.Tensor):
        return True
    if not isinstance(value, Mapping) or not value:
        return False
    # A model's state_dict() (str -> tensor) and an optimizer's (int keys, nested dicts and lists
    # of tensors and numbers): what torch.load(weights_only=True) reads back.
    return _tensor_count(dict(value), torch.Tensor) > 0


def _have_safetensors() -> bool:
    import importlib.util

    return importlib.util.find_spec("safetensors") is not None


def _encode_torch(value: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    # torch.save of tensors (and dicts of them) is loadable with weights_only=True: no code runs.
    torch.save(dict(value) if isinstance(value, Mapping) else value, buf)
    return buf.getvalue()


def _decode_torch(data: Buffer) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def _encode_safetensors(value: Any) -> bytes:
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in value.items()})


def _decode_safetensors(data: Buffer) -> Any:
    from safetensors.torch import load

    return load(bytes(data))


def _is_torch_dict_for_safetensors(value: Any) -> bool:
    # safetensors holds a flat str -> tensor mapping only (a model's state_dict()).
    torch = _module_loaded("torch")
    return (
        torch is not None
        and isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())
        and _have_safetensors()
    )


# -- scikit-learn ------------------------------------------------------------------------------
def _is_sklearn(value: Any) -> bool:
    base = _module_loaded("sklearn.base")
    return base is not None and isinstance(value, base.BaseEstimator)


def _encode_pickle(value: Any) -> bytes:
    import pickle

    return pickle.dumps(value, protocol=5)


def _decode_pickle(data: Buffer) -> Any:
    import pickle

    return pickle.loads(data)  # sklearn estimators have no pickle-free format


# -- JSON --------------------------------------------------------------------------------------
_JSON_SCALARS = frozenset((type(None), bool, int, str))


def _json_exact(value: Any) -> bool:
    # Exact types: JSON gives back a subclass (an IntEnum, numpy.float64, numpy.str_, an
    # OrderedDict) as its base type, a silent change the restoring code would not expect.
    kind = type(value)
    if kind in _JSON_SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)  # JSON has no NaN/inf
    if kind is list:
        return all(_json_exact(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _json_exact(v) for k, v in value.items())
    return False


def _encode_json(value: Any) -> bytes:
    return json.dumps(value, allow_nan=False).encode()  # keeps dict order


def _decode_json(data: Buffer) -> Any:
    return json.loads(bytes(data))


def _builtin(
    name: str,
    matches: Callable[[Any], bool],
    encode: Callable[[Any], Buffer | Chunks],
    decode: Callable[[Any], Any],
    *,
    pickle: bool = False,
) -> Adapter:
    # The suffix of a built-in adapter is the checkpoint format's (one table, in checkpoints).
    return Adapter(name, BUILTIN_SUFFIXES[name], matches, encode, decode, pickle)


BUILTIN_ADAPTERS: tuple[Adapter, ...] = (
    _builtin("bytes", _is_bytes, _encode_bytes, bytes),
    _builtin("numpy", _is_ndarray, _encode_ndarray, _decode_ndarray),
    _builtin("numpy-scalar", _is_numpy_scalar, _encode_numpy_scalar, _decode_numpy_scalar),
    _builtin("numpy-dict", _is_ndarray_dict, _encode_ndarray_dict, _decode_ndarray_dict),
    _builtin("numpy-generator", _is_generator, _encode_generator, _decode_generator),
    _builtin("numpy-random-state", _is_random_state, _encode_random_state, _decode_random_state),
    _builtin("python-random", _is_python_random, _encode_python_random, _decode_python_random),
    _builtin(
        "safetensors", _is_torch_dict_for_safetensors, _encode_safetensors, _decode_safetensors
    ),
    _builtin("torch", _is_torch, _encode_torch, _decode_torch),
    _builtin("sklearn", _is_sklearn, _encode_pickle, _decode_pickle, pickle=True),
    _builtin("json", _json_exact, _encode_json, _decode_json),
)

_REGISTRY: dict[str, Adapter] = {a.name: a for a in BUILTIN_ADAPTERS}
_BUILTIN_NAMES = frozenset(_REGISTRY)
_ORDER: list[Adapter] = list(BUILTIN_ADAPTERS)


def register(adapter: Adapter) -> None:
    """Add an adapter, tried before the built-in ones; its name must be new."""
    if adapter.name in _REGISTRY:
        raise ValueError(f"an adapter named {adapter.name!r} is already registered")
    if not adapter.suffix.startswith("."):
        raise ValueError(f"adapter suffix must start with '.', got {adapter.suffix!r}")
    _REGISTRY[adapter.name] = adapter
    _ORDER.insert(0, adapter)


def get(name: str) -> Adapter:
    """The adapter called ``name``; raises StateEncodingError naming the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise StateEncodingError(
            f"unknown state adapter {name!r} (known: {', '.join(sorted(_REGISTRY))}); "
            "register it with kfp_spot.trainer.adapters.register before restoring"
        ) from None


def allowed(*, allow_pickle: bool = False) -> dict[str, str]:
    """The adapters a reader accepts, name -> file suffix.

    Every registered adapter, except pickle-based ones unless ``allow_pickle`` (unpickling runs
    code the file names).
    """
    return {a.name: a.suffix for a in _REGISTRY.values() if allow_pickle or not a.pickle}


def taker(value: Any) -> Adapter | None:
    """The first adapter that takes ``value``, or None."""
    return next((adapter for adapter in _ORDER if adapter.matches(value)), None)


def adapter_for(key: str, value: Any) -> Adapter:
    """The first adapter that takes ``value``; raises StateEncodingError naming ``key``."""
    try:
        adapter = taker(value)
        if adapter is not None:
            return adapter
        from kfp_spot.trainer.state_hints import unstored_item

        item = unstored_item(key, value, lambda inner: getattr(taker(inner), "name", None))
    except RecursionError:  # a dict or list that holds itself, or one nested thousands deep
        raise StateEncodingError(
            f"state[{key!r}] holds itself (a dict or list that refers to itself) or is nested "
            "too deeply to store; save a copy without the cycle, or flatten it"
        ) from None
    if item and not isinstance(value, (dict, list, tuple)):
        raise StateEncodingError(item)
    if item:
        raise StateEncodingError(
            f"{item} (a dict or list in a state is stored as exact JSON: numbers, strings, "
            "bools, None and lists and dicts of them; or as an .npz: a dict of NumPy arrays only)"
        )
    raise StateEncodingError(
        f"state[{key!r}] is a {type(value).__module__}.{type(value).__qualname__}, which no "
        "adapter stores (bytes, numpy arrays or dicts of them, RNGs, torch tensors/state dicts, "
        "scikit-learn estimators, exact JSON); convert it or register an Adapter"
    )


def encode_state(
    state: Mapping[str, Any], *, allow_pickle: bool = True
) -> tuple[dict[str, Buffer | Chunks], dict[str, dict[str, str]]]:
    """Encode a training state into checkpoint files.

    Contents may be views of the values' own memory (a NumPy array is not copied): write them
    before the values change, or copy them.

    Args:
        state: name -> value. Names become file names, so they must be simple.
        allow_pickle: whether values that only a pickle-based adapter stores are accepted.

    Returns:
        ``(files, index)``: file name -> content (bytes-like, or :class:`Chunks`), and name ->
        ``{"file", "adapter"}`` for the manifest.

    Raises:
        StateEncodingError: a value has no adapter, or only a pickle-based one and
            ``allow_pickle`` is False.
        ValueError: a name is not a simple file name.
    """
    if not isinstance(state, Mapping):
        raise StateEncodingError(
            f"state must be a mapping of names to values, got {type(state).__name__}"
        )
    if not state:
        raise ValueError(
            "state is empty: a step without files cannot be restored; pass the values to save"
        )
    files: dict[str, Buffer | Chunks] = {}
    index: dict[str, dict[str, str]] = {}
    folded: dict[str, str] = {}  # the file name as a case-insensitive disk sees it -> its key
    for key, value in state.items():
        if not is_state_key(key):
            raise ValueError(f"state key {key!r} must be {STATE_KEY_RULE}")
        adapter = adapter_for(key, value)
        if adapter.pickle and not allow_pickle:
            raise StateEncodingError(
                f"state[{key!r}] is stored with the pickle-based adapter {adapter.name!r}, and "
                "restoring it would unpickle (run code named by the checkpoint file). Pass "
                "allow_pickle=True to CheckpointManager if only you can write this checkpoint "
                "root, or store the value in another form"
            )
        name = f"{key}{adapter.suffix}"
        _check_file_name(key, name, folded)
        try:
            files[name] = adapter.encode(value)
        except _Refused as exc:
            raise StateEncodingError(f"state[{key!r}]{exc.where} {exc.why}") from None
        index[key] = {"file": name, "adapter": adapter.name}
    return files, index


_MAX_NAME_BYTES = 255
"""The longest file name (in UTF-8 bytes) Linux, macOS and Windows file systems all take."""


def _check_file_name(key: str, name: str, folded: dict[str, str]) -> None:
    """Raise ValueError when ``name`` (the file of state ``key``) cannot be written everywhere.

    Every disk takes it or none does: a save that works on Linux must not fail, or silently
    overwrite another value's file, on a Mac (APFS ignores case and Unicode normalization).
    """
    import unicodedata

    # "Manifest" is manifest.json on a case-insensitive disk (macOS): the manifest, written
    # last, would overwrite its file and the step fail its checksum, as damage.
    fold = unicodedata.normalize("NFC", name).casefold()
    if fold == MANIFEST_NAME:
        raise ValueError(
            f"state key {key!r} cannot be used: its file would be {name!r}, which is the "
            f"checkpoint's {MANIFEST_NAME!r} (on a case-insensitive disk too); rename the key"
        )
    if "\\" in name or "\x00" in name:
        raise ValueError(
            f"state key {key!r} cannot be used: its file would be {name!r}, which holds a "
            "backslash or NUL; rename the key"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"state key {key!r} is not valid Unicode (it holds a lone surrogate, as a name "
            "decoded with errors='surrogateescape' does): Cloud Storage's object names are "
            "UTF-8, and a local disk's file name would not match it; rename the key"
        ) from None
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        raise ValueError(
            f"state key {key[:40]!r}... is too long: its file name would be "
            f"{len(name.encode('utf-8'))} bytes, over the {_MAX_NAME_BYTES} "
            "file systems allow; use a shorter key"
        )
    other = folded.get(fold)
    if other is not None:
        raise ValueError(
            f"state keys {other!r} and {key!r} differ only in case or Unicode form: on a "
            f"case-insensitive disk (macOS, Windows) their files are one file; rename one"
        )
    folded[fold] = key


def decode_state(
    read: Callable[[str], Buffer | Chunks], index: Mapping[str, Mapping[str, str]]
) -> dict[str, Any]:
    """Decode a training state written by :func:`encode_state`.

    Args:
        read: file name -> its content (bytes-like, or :class:`Chunks`).
        index: the manifest's state index.
    """
    out = {}
    for key, entry in index.items():
        adapter = get(entry["adapter"])
        raw = read(entry["file"])
        data: Buffer = bytearray(bytes(raw)) if isinstance(raw, Chunks) else raw
        if adapter.name not in _BUILTIN_NAMES and not isinstance(data, bytes):
            data = bytes(data)
        try:
            out[key] = adapter.decode(data)
        except _decode_errors() as exc:
            raise StateEncodingError(
                f"state[{key!r}] ({entry['file']}) cannot be decoded by adapter "
                f"{adapter.name!r}: {type(exc).__name__}: {exc}"
            ) from exc
    return out
