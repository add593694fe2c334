"""Hostile-input harness for every zarrext decoder and metadata parser.

Shared by ``tests/test_fuzz.py`` (a few hundred inputs per target, in ``make test``)
and ``scripts/fuzz.py`` (long runs with statistics). Each target encodes a random
valid chunk, a seeded mutator damages it, and the whole codec chain decodes it. An
input may decode (to the chunk's shape and data type) or raise the codec's own
``ValueError``-family error naming the codec; anything else is *unclean*. zarr's own
codecs are kept out of the decode path after a zarrext codec (their errors are
zarr-python's), except inside ``conditional``, ``optional`` and ``n5_default``, which
own the errors of the codecs they nest.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import struct
import threading
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

import numpy as np
from zarr.codecs import BytesCodec, GzipCodec, VLenUTF8Codec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_utils import ChunkTransform
from zarr.core.dtype import (
    Float32,
    Int16,
    Int32,
    UInt8,
    UInt16,
    VariableLengthUTF8,
    get_data_type_from_json,
)

from zarrext import (
    ConditionalCodec,
    N5DefaultCodec,
    OptionalCodec,
    OptionalDType,
    PackBitsCodec,
    PadCodec,
    ShuffleCodec,
)

PROTO = default_buffer_prototype()


@dataclass(frozen=True)
class Target:
    """One decoder under test: its codec chain, data type and chunk shape."""

    name: str
    codecs: tuple[Any, ...]
    dtype: Any
    shape: tuple[int, ...]
    # The words a clean error message must contain (the codec's name).
    names: tuple[str, ...]

    def spec(self) -> ArraySpec:
        return ArraySpec(
            shape=self.shape, dtype=self.dtype, fill_value=self.dtype.default_scalar(),
            config=ArrayConfig.from_dict({}), prototype=PROTO,
        )

    def transform(self) -> ChunkTransform:
        spec = self.spec()
        evolved = []
        for codec in self.codecs:
            codec = codec.evolve_from_array_spec(spec)
            evolved.append(codec)
            spec = codec.resolve_metadata(spec)
        return ChunkTransform(codecs=tuple(evolved))

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A random valid chunk of this target's data type and shape."""
        native = self.dtype.to_native_dtype()
        if isinstance(self.dtype, OptionalDType):
            out = np.zeros(self.shape, native)
            out["valid"] = rng.random(self.shape) < 0.6
            inner = native["value"]
            if inner.names:  # nested optional
                out["value"]["valid"] = rng.random(self.shape) < 0.6
                out["value"]["value"] = rng.integers(0, 200, self.shape)
            elif inner.kind == "O":
                words = np.array(["", "a", "zarr", "ünï", "x" * 9], dtype=object)
                out["value"] = words[rng.integers(0, len(words), self.shape)]
                out["value"][~out["valid"]] = ""
            else:
                out["value"] = rng.integers(0, 100, self.shape).astype(inner)
            return out
        if native.kind == "f":
            return rng.normal(size=self.shape).astype(native)
        info = np.iinfo(native)
        return rng.integers(info.min, info.max, self.shape, endpoint=True).astype(native)


def targets() -> list[Target]:
    """Every decoder, in the configurations that take different decode paths."""
    u8, i16, f32 = UInt8(), Int16(), Float32()
    opt = OptionalDType(u8)
    found: list[Target] = [
        Target("conditional", (BytesCodec(), ConditionalCodec(
            [ShuffleCodec(element_size=4), ZstdCodec(level=1)], decision="always_apply")),
            f32, (6, 5), ("conditional",)),
        Target("conditional-unapplied", (BytesCodec(), ConditionalCodec(
            [GzipCodec(level=1)], header_bits=16)), i16, (7,), ("conditional",)),
        Target("optional", (OptionalCodec(mask_codecs=[PackBitsCodec()],
                                          data_codecs=[BytesCodec(), ZstdCodec(level=1)]),),
               opt, (4, 3), ("optional",)),
        Target("optional-nested", (OptionalCodec.default_for(OptionalDType(opt)),),
               OptionalDType(opt), (5,), ("optional",)),
        Target("optional-string", (OptionalCodec(
            mask_codecs=[PackBitsCodec(), GzipCodec(level=1)],
            data_codecs=[VLenUTF8Codec()]),), OptionalDType(VariableLengthUTF8()), (6,),
            ("optional",)),
        Target("shuffle", (BytesCodec(), ShuffleCodec(element_size=2)), i16, (9,), ("shuffle",)),
        Target("pad-start", (BytesCodec(), PadCodec(location="start", nbytes=8)), u8, (10,),
               ("pad",)),
        Target("pad-end", (BytesCodec(), PadCodec(location="end", nbytes=3)), i16, (3, 3),
               ("pad",)),
        Target("n5_default", (N5DefaultCodec(ndim=2),), i16, (3, 4), ("n5_default",)),
        Target("n5_default-gzip", (N5DefaultCodec(ndim=1, compressor=GzipCodec(level=1)),),
               Int32(), (5,), ("n5_default",)),
        Target("n5_default-zstd", (N5DefaultCodec(ndim=2, compressor=ZstdCodec(level=1)),),
               u8, (2, 3), ("n5_default",)),
    ]
    for encoding in ("none", "first_byte", "last_byte"):
        found.append(Target(f"packbits-{encoding}", (PackBitsCodec(
            padding_encoding=encoding, first_bit=2, last_bit=11),), UInt16(), (7,),
            ("packbits",)))
    return found


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One damaged copy of ``data``: truncated, extended, flipped, or length fields
    set to extreme values, or random bytes altogether."""
    kind = rng.randrange(7)
    buf = bytearray(data)
    if kind == 0 and buf:
        return bytes(buf[: rng.randrange(len(buf))])
    if kind == 1:
        return bytes(buf) + rng.randbytes(rng.randrange(1, 16))
    if kind == 2 and buf:
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if kind in (3, 4) and len(buf) >= 8:
        width = 8 if kind == 3 else 4
        i = rng.randrange(0, len(buf) - width + 1)
        value = rng.choice([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(buf), len(buf) + 1])
        value %= 2 ** (8 * width)
        fmt = rng.choice(["<", ">"]) + ("Q" if width == 8 else "I")
        struct.pack_into(fmt, buf, i, value)
        return bytes(buf)
    if kind == 5 and buf:
        i = rng.randrange(len(buf))
        return bytes(buf[:i] + buf[i + 1 :])
    return rng.randbytes(rng.randrange(0, 2 * len(buf) + 8))


@dataclass(frozen=True)
class Work:
    """What one input cost: the function calls made on the read path (zarr's,
    zarrext's, numcodecs' and numpy's code, Python and C, in every thread) and the
    most memory held at once beyond what was held before (tracemalloc)."""

    calls: int
    peak_bytes: int

    def within(self, budget: Work) -> bool:
        return self.calls <= budget.calls and self.peak_bytes <= budget.peak_bytes


# The packages whose calls count as work: the decode path's. Calls made by anything
# else that happens to run meanwhile (another test's leftover threads) do not.
_COUNTED = ("zarr", "numcodecs", "numpy")


def _counted(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    return isinstance(module, str) and module.startswith(_COUNTED)


class Meter:
    """Measures the :class:`Work` of what runs inside ``with meter:``; the result is
    ``meter.work``, set also when the block raises."""

    work: Work

    def __enter__(self) -> Meter:
        counter = itertools.count()

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            # "call" passes the called function's frame, "c_call" the caller's.
            if event in ("call", "c_call") and _counted(frame):
                next(counter)

        self._counter = counter
        self._started = not tracemalloc.is_tracing()
        if self._started:
            tracemalloc.start()
        tracemalloc.reset_peak()
        self._held = tracemalloc.get_traced_memory()[0]
        threading.setprofile_all_threads(profile)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        threading.setprofile_all_threads(None)
        peak = tracemalloc.get_traced_memory()[1]
        if self._started:
            tracemalloc.stop()
        self.work = Work(calls=next(self._counter), peak_bytes=max(0, peak - self._held))


def budget(valid: Work, size: int) -> Work:
    """What a damaged input of ``size`` bytes may cost, ``valid`` being the cost of
    the undamaged input: four times as much, plus a share linear in the damaged
    input's size (a longer document takes longer to refuse, linearly, never by what
    its bytes claim) and an allowance for building the error."""
    return Work(calls=4 * (valid.calls + size) + 500,
                peak_bytes=4 * (valid.peak_bytes + 64 * size) + 64 * 1024)


def json_size(document: Any) -> int:
    """A metadata document's size: the bytes of its JSON."""
    return len(json.dumps(document))


@dataclass
class Outcome:
    """What one input did, and what it cost."""

    kind: str  # "ok", "clean" or "unclean"
    work: Work
    detail: str = ""


def raised_in_zarrext(error: BaseException) -> bool:
    """Whether the innermost frame that raised ``error`` runs a module of the
    ``zarrext`` package.

    Decided by the frame's module name, never by its file's path: a checkout named
    ``zarrext`` holds its venv, and with it zarr's own files, under that name.
    """
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return module == "zarrext" or module.startswith("zarrext.")


def decode_one(target: Target, transform: ChunkTransform, data: bytes) -> Outcome:
    """Decode ``data`` with ``target``'s chain and classify the result."""
    spec = target.spec()
    meter = Meter()
    try:
        with meter:
            out = transform.decode_chunk(PROTO.buffer.from_bytes(data), spec)
    except ValueError as e:
        if any(name in str(e) for name in target.names) or not raised_in_zarrext(e):
            # zarr's own ``bytes`` codec refusing a wrong length is zarr's error.
            return Outcome("clean", meter.work)
        return Outcome("unclean", meter.work,
                       f"{type(e).__name__} without the codec's name: {e}")
    except Exception as e:
        return Outcome("unclean", meter.work, f"{type(e).__name__}: {e}")
    array = out.as_numpy_array()
    if array.shape != target.shape or array.dtype != target.dtype.to_native_dtype():
        return Outcome("unclean", meter.work, f"decoded {array.shape} {array.dtype}")
    return Outcome("ok", meter.work)


def inputs(target: Target, seed: int, count: int) -> Callable[[], tuple[bytes, bytes]]:
    """A generator of ``(valid, mutated)`` chunk bytes for ``target``."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    transform = target.transform()
    spec = target.spec()
    pool = []
    for _ in range(8):
        encoded = transform.encode_chunk(
            PROTO.nd_buffer.from_numpy_array(target.sample(nrng)), spec
        )
        assert encoded is not None
        pool.append(encoded.to_bytes())

    def one() -> tuple[bytes, bytes]:
        valid = rng.choice(pool)
        return valid, mutate(valid, rng)

    return one


# -- metadata -----------------------------------------------------------------------

METADATA_SEEDS: list[tuple[str, dict[str, Any]]] = [
    ("conditional", ConditionalCodec([ShuffleCodec(element_size=4), ZstdCodec()]).to_dict()),
    ("optional", OptionalCodec.default_for(OptionalDType(OptionalDType(UInt8()))).to_dict()),
    ("packbits", PackBitsCodec(padding_encoding="last_byte", first_bit=1, last_bit=5).to_dict()),
    ("pad", PadCodec(location="start", nbytes=4, padding=b"II*\0").to_dict()),
    ("shuffle", ShuffleCodec(element_size=8).to_dict()),
    ("n5_default", N5DefaultCodec(ndim=2, compressor=GzipCodec()).to_dict()),
]
_PARSERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "conditional": ConditionalCodec.from_dict,
    "optional": OptionalCodec.from_dict,
    "packbits": PackBitsCodec.from_dict,
    "pad": PadCodec.from_dict,
    "shuffle": ShuffleCodec.from_dict,
    "n5_default": N5DefaultCodec.from_dict,
    "optional data type": lambda d: get_data_type_from_json(d, zarr_format=3),
}
METADATA_SEEDS.append(
    ("optional data type", OptionalDType(OptionalDType(Int16())).to_json(zarr_format=3))
)
_ODD_VALUES: list[Any] = [None, 0, -1, 2**70, 1.5, "", "x", [], {}, [None], {"name": 3}, True]


def mutate_metadata(document: dict[str, Any], rng: random.Random) -> Any:
    """A damaged copy of a metadata document: a value replaced, a key dropped or
    added, or the document nested in itself many times."""
    doc = copy.deepcopy(document)
    kind = rng.randrange(4)
    if kind == 3:
        # Nested in itself, each level once (a JSON document has no shared parts).
        config = document.get("configuration")
        keys = sorted(config) if isinstance(config, dict) and config else ["codecs"]
        key = rng.choice(keys)
        for _ in range(rng.choice([40, 300])):
            inner = dict(config) if isinstance(config, dict) else {}
            inner[key] = [doc] if key.endswith("codecs") else doc
            doc = {"name": document["name"], "configuration": inner}
        return doc
    # Walk to a random mapping or list inside the document.
    node: Any = doc
    for _ in range(rng.randrange(4)):
        children = list(node.values()) if isinstance(node, dict) else (
            node if isinstance(node, list) else [])
        children = [c for c in children if isinstance(c, dict | list) and c]
        if not children:
            break
        node = rng.choice(children)
    if isinstance(node, dict) and node:
        key = rng.choice(sorted(node))
        if kind == 0:
            node[key] = rng.choice(_ODD_VALUES)
        elif kind == 1:
            del node[key]
        else:
            node[rng.choice(["extra", "name", "configuration", "must_understand"])] = rng.choice(
                _ODD_VALUES)
    elif isinstance(node, list) and node:
        node[rng.randrange(len(node))] = rng.choice(_ODD_VALUES)
    return doc


def parse_one(parser: str, document: Any) -> Outcome:
    """Parse ``document``; a ``ValueError``/``TypeError``-family refusal is clean (zarr's
    own parsers refuse bad metadata with either), anything else unclean."""
    meter = Meter()
    try:
        with meter:
            _PARSERS[parser](document)
    except (ValueError, TypeError) as e:
        return Outcome("clean", meter.work, type(e).__name__)
    except Exception as e:
        return Outcome("unclean", meter.work, f"{type(e).__name__}: {e}")
    return Outcome("ok", meter.work)


# -- zarrext's pipeline: a real array, damaged chunk files, read back ----------------


@dataclass(frozen=True)
class PipelineTarget:
    """An array on a local store whose chunk (or shard) files are damaged and read back
    through :func:`zarrext.open_array`: zarrext's own read path (the pipeline's chunk
    jobs, scratch decoders, whole-shard reads), zarr's codecs in it included.

    A clean failure is a :class:`zarrext.errors.ChunkDecodeError` naming the array,
    the damaged file's key and a codec.
    """

    name: str
    create: dict[str, Any]  # zarrext.create_array's arguments besides store and name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.create["shape"])

    def block(self) -> tuple[int, ...]:
        """The shape of one stored file (a chunk, or a shard)."""
        return tuple(self.create.get("shards") or self.create["chunks"])


def pipeline_targets() -> list[PipelineTarget]:
    """Chains whose stored files go through different parts of the read path."""
    from zarr.codecs import Crc32cCodec

    opt = OptionalDType(UInt16())
    return [
        PipelineTarget("pipeline-shuffle-zstd", dict(
            shape=(8, 6), chunks=(4, 6), dtype="int16", serializer=BytesCodec(),
            compressors=[ShuffleCodec(element_size=2), ZstdCodec(level=1)])),
        PipelineTarget("pipeline-pad-zstd", dict(
            shape=(12,), chunks=(6,), dtype="uint8", serializer=BytesCodec(),
            compressors=[PadCodec(location="end", nbytes=5), ZstdCodec(level=1)])),
        PipelineTarget("pipeline-conditional-crc32c", dict(
            shape=(6, 6), chunks=(3, 6), dtype="float32", serializer=BytesCodec(),
            compressors=[ConditionalCodec([ShuffleCodec(element_size=4), ZstdCodec(level=1)],
                                          decision="always_apply"), Crc32cCodec()])),
        PipelineTarget("pipeline-optional", dict(
            shape=(10,), chunks=(5,), dtype=opt, fill_value=None,
            serializer=OptionalCodec(mask_codecs=[PackBitsCodec()],
                                     data_codecs=[BytesCodec(), ZstdCodec(level=1)]),
            compressors=None)),
        PipelineTarget("pipeline-sharded", dict(
            shape=(8, 8), chunks=(2, 4), shards=(4, 8), dtype="int16",
            serializer=BytesCodec(), compressors=[ShuffleCodec(element_size=2),
                                                  ZstdCodec(level=1)])),
    ]


class PipelineRun:
    """One :class:`PipelineTarget`'s array in ``directory``, and its damaged reads."""

    def __init__(self, target: PipelineTarget, directory: Any, seed: int) -> None:
        import zarr

        import zarrext

        self.target = target
        nrng = np.random.default_rng(seed)
        store = zarr.storage.LocalStore(str(directory))
        array = zarrext.create_array(store, name="a", **target.create)
        if isinstance(array.metadata.data_type, OptionalDType):
            values = np.zeros(target.shape, array.dtype)
            values["valid"] = nrng.random(target.shape) < 0.6
            values["value"] = nrng.integers(0, 1000, target.shape)
        else:
            native = array.dtype
            values = (nrng.normal(size=target.shape) * 100).astype(native)
        array[...] = values
        self.values = values
        self.dtype = array.dtype
        self.root = directory / "a"
        keys = sorted(
            str(p.relative_to(self.root)) for p in self.root.rglob("*")
            if p.is_file() and p.name != "zarr.json"
        )
        self.pool = [(key, (self.root / key).read_bytes()) for key in keys]
        self.array = zarrext.open_array(store, path="a", mode="r")
        # Read once whole before any input: what a first read does once (start the
        # codec threads, import codecs) is no input's work.
        self.array[...]
        encoding = self.array.metadata.chunk_key_encoding  # type: ignore[union-attr]
        block = target.block()
        # Each input reads the region of the file it damaged (its chunk, or shard).
        self.region = {
            key: tuple(
                slice(i * b, min((i + 1) * b, n))
                for i, b, n in zip(encoding.decode_chunk_key(key), block, target.shape,
                                   strict=True)
            )
            for key, _ in self.pool
        }

    def inputs(self, seed: int) -> Callable[[], tuple[str, bytes, bytes]]:
        """A generator of ``(key, valid, damaged)`` for a stored file."""
        rng = random.Random(seed)

        def one() -> tuple[str, bytes, bytes]:
            key, valid = rng.choice(self.pool)
            return key, valid, mutate(valid, rng)

        return one

    def read_one(self, key: str, data: bytes) -> Outcome:
        """Store ``data`` as the file at ``key``, read its region back, classify.

        Other files may hold an earlier input's damage: they are not read.
        """
        from zarrext.errors import ChunkDecodeError

        (self.root / key).write_bytes(data)
        region = self.region[key]
        meter = Meter()
        try:
            with meter:
                out = self.array[region]
        except ChunkDecodeError as e:
            # The key relative to the store: the array's path, then the file's.
            if e.array == "a" and e.key == f"a/{key}" and e.codec and e.codec in str(e):
                return Outcome("clean", meter.work)
            return Outcome("unclean", meter.work, f"ChunkDecodeError naming too little: {e}")
        except Exception as e:
            return Outcome("unclean", meter.work, f"{type(e).__name__}: {e}")
        expected = tuple(s.stop - s.start for s in region)
        if out.shape != expected or out.dtype != self.dtype:
            return Outcome("unclean", meter.work, f"read {out.shape} {out.dtype}")
        return Outcome("ok", meter.work)


# -- optional fill values in metadata --------------------------------------------------

FILL_VALUE_SEEDS: list[tuple[str, Any, Any]] = [
    ("optional(uint8)", OptionalDType(UInt8()), [7]),
    ("optional(int16)", OptionalDType(Int16()), [-3]),
    ("optional(float32)", OptionalDType(Float32()), ["NaN"]),
    ("optional(optional(uint16))", OptionalDType(OptionalDType(UInt16())), [[9]]),
    ("optional(optional(int32))", OptionalDType(OptionalDType(Int32())), [None]),
]
_ODD_FILLS: list[Any] = [
    300, -1, 2**31, 2**64, 2**70, -(2**70), 1.5, "x", "NaN", "Infinity", "0x7fc00000", "",
    [], {}, True, None, [None], [[None]], [1, 2],
]


def mutate_fill_value(fill: Any, rng: random.Random) -> Any:
    """An odd fill value: the innermost value replaced, or the whole value, or a level
    added or removed."""
    kind = rng.randrange(4)
    odd = rng.choice(_ODD_FILLS)
    if kind == 0:
        return odd
    if kind == 1:
        return [fill]
    if kind == 2:
        return fill[0] if isinstance(fill, list) and fill else [odd]
    copied = copy.deepcopy(fill)
    node = copied
    while isinstance(node, list) and node and isinstance(node[0], list):
        node = node[0]
    if isinstance(node, list) and node:
        node[0] = odd
    return copied


def parse_fill_value(dtype: Any, fill: Any) -> Outcome:
    """Parse ``fill`` as ``dtype``'s fill value in metadata: a ``ValueError``-family
    error naming the ``fill_value`` field is clean, anything else unclean."""
    meter = Meter()
    try:
        with meter:
            dtype.from_json_scalar(fill, zarr_format=3)
    except ValueError as e:
        if "fill_value" in str(e):
            return Outcome("clean", meter.work)
        return Outcome("unclean", meter.work, f"{type(e).__name__} not naming fill_value: {e}")
    except Exception as e:
        return Outcome("unclean", meter.work, f"{type(e).__name__}: {e}")
    return Outcome("ok", meter.work)
