"""What every case builder shares: metadata, codec JSON, byte layouts, and the case record.

The encoders here are a small reference implementation written from the specs'
byte layouts (and, for the stock codecs, from zarr's own specs: ``bytes`` is the
elements in C order with the configured endianness, ``crc32c`` appends the
checksum as a little-endian u32, ``transpose`` permutes axes before ``bytes``).
Compressed streams come from zlib/gzip (``mtime=0``) and numcodecs' zstd; any
valid stream of those formats is a valid chunk, so a reader must read these.
"""

from __future__ import annotations

import base64
import gzip as _gzip
import itertools
import json
import math
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import google_crc32c
import numcodecs
import numpy as np

from conformance.builders import causes, numeric

JSON = Any
Coords = tuple[int, ...]
U64_MAX = (1 << 64) - 1

SPECS: dict[str, dict[str, str]] = {
    "000": {
        "folder": "000-conditional",
        "title": "Optional Codec (published in the zarr-extensions registry as `conditional`)",
        "source": "https://github.com/zarr-developers/zarr-extensions/tree/main/codecs/"
                  "conditional (first published as the `optional` codec)",
    },
    "001": {
        "folder": "001-sharding_indexed",
        "title": "Sharding codec (version 1.0)",
        "source": "https://zarr-specs.readthedocs.io/en/latest/v3/codecs/sharding-indexed/v1.0.html",
    },
    "002": {
        "folder": "002-scale_offset-cast_value",
        "title": "scale_offset and cast_value codecs (summary of zarr-extensions#43)",
        "source": "https://github.com/zarr-developers/zarr-extensions/pull/43",
    },
    "003": {
        "folder": "003-optional",
        "title": "Optional codec (array -> bytes, for the optional data type)",
        "source": "https://github.com/zarr-developers/zarr-extensions/tree/main/codecs/optional",
    },
    "004": {
        "folder": "004-pad",
        "title": "Pad Codec (version 0.1.0, proposal)",
        "source": "https://github.com/zarr-developers/zarr-extensions/tree/main/codecs/pad",
    },
}


# -- the case record -----------------------------------------------------------------


@dataclass
class Case:
    """One test vector, as written to ``cases/<spec>/<id>/``.

    ``kind`` is ``read`` (``objects`` must read as ``expected``), ``refuse``
    (``operation`` on the array must fail) or ``write`` (writing ``input`` into
    ``selection`` of an empty array must store exactly ``expected_objects``).
    """

    id: str
    spec: str
    section: str
    clause: str
    kind: str
    description: str
    metadata: dict[str, JSON]
    objects: dict[str, bytes] = field(default_factory=dict)
    expected: np.ndarray | None = None
    input: np.ndarray | None = None
    expected_objects: dict[str, bytes] = field(default_factory=dict)
    selection: list[list[int]] | None = None
    operation: str = "read"
    because: str = ""
    level: str = "MUST"
    writer: dict[str, JSON] = field(default_factory=dict)
    compare: dict[str, JSON] = field(default_factory=lambda: {"mode": "exact"})
    deviation: dict[str, JSON] | None = None
    notes: str = ""
    cause: str = ""  # refuse cases: one of causes.VOCABULARY (PROTOCOL.md)

    def record(self) -> dict[str, JSON]:
        """``case.json``."""
        out: dict[str, JSON] = {
            "id": self.id,
            "spec": self.spec,
            "spec_title": SPECS[self.spec]["title"],
            "spec_source": SPECS[self.spec]["source"],
            "section": self.section,
            "clause": self.clause,
            "level": self.level,
            "kind": self.kind,
            "description": self.description,
            "store": "store",
        }
        name = spec_000_codec_name(self.metadata) if self.spec == "000" else None
        if name is not None:
            out["codec_name"] = name
        if self.kind == "read":
            out["expected"] = {"outcome": "values", "values": "expected.npy"}
        elif self.kind == "refuse":
            out["expected"] = {"outcome": "refusal", "operation": self.operation,
                               "cause": self.cause, "because": self.because}
            if self.operation == "write":
                out["expected"]["input"] = "input.npy"
                out["expected"]["selection"] = self.selection
                out["writer"] = {"write_empty_chunks": False, **self.writer}
        else:
            out["expected"] = {
                "outcome": "bytes",
                "input": "input.npy",
                "selection": self.selection,
                "objects": sorted(self.expected_objects),
                "compare": self.compare,
            }
            out["writer"] = self.writer
        if self.deviation is not None:
            out["zarrext_deviation"] = self.deviation
        if self.notes:
            out["notes"] = self.notes
        return out

    def check(self) -> None:
        """Refuse an inconsistent case at generation time."""
        assert self.kind in ("read", "refuse", "write"), self.kind
        assert self.spec in SPECS, self.spec
        assert self.clause.strip(), self.id
        assert self.section.strip(), self.id
        if self.kind == "read":
            assert self.expected is not None, self.id
        if self.kind == "write":
            assert self.input is not None, self.id
            assert self.expected_objects, self.id
        if self.compare.get("roundtrip"):
            assert self.selection is None, f"{self.id}: a roundtrip compares with the input"
        if self.deviation is not None:
            # the spec's outcome is expected; zarrext's own is recorded beside it
            assert "zarrext_outcome" in self.deviation, self.id
            assert "reason" in self.deviation, self.id
        assert self.level in ("MUST", "SHOULD", "implied", "interop"), self.id
        if self.kind == "refuse":
            assert self.because, self.id
            assert self.cause in causes.VOCABULARY, f"{self.id}: cause {self.cause!r}"
            assert self.operation in ("read", "write"), self.id
            if self.operation == "write":
                assert self.input is not None, self.id


def spec_000_codec_name(metadata: dict[str, JSON]) -> str | None:
    """The name spec 000's codec goes by in ``metadata`` (``conditional`` or
    ``optional``, the name the spec's text uses), nested codecs searched too."""

    def visit(codecs: Any) -> str | None:
        for codec in codecs or ():
            if not isinstance(codec, dict):
                continue
            config = codec.get("configuration") or {}
            if codec.get("name") == "conditional" or (
                    codec.get("name") == "optional" and "mask_codecs" not in config
                    and "data_codecs" not in config):
                return str(codec["name"])
            for key in ("codecs", "index_codecs"):
                found = visit(config.get(key)) if isinstance(config, dict) else None
                if found:
                    return found
        return None

    return visit(metadata.get("codecs"))


def rng_for(case_id: str) -> np.random.Generator:
    """A generator seeded by the case id alone: the same values on every run."""
    return np.random.default_rng(zlib.crc32(case_id.encode()))


# -- metadata ------------------------------------------------------------------------


def array_metadata(shape: Sequence[int], chunks: Sequence[int], data_type: JSON,
                   fill_value: JSON, codecs: list[JSON], *,
                   key_encoding: str = "default", separator: str = "/",
                   attributes: Mapping[str, JSON] | None = None) -> dict[str, JSON]:
    """A Zarr v3 array's ``zarr.json``."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": key_encoding, "configuration": {"separator": separator}},
        "fill_value": fill_value,
        "codecs": codecs,
        "attributes": dict(attributes or {}),
    }


def chunk_key(coords: Sequence[int], encoding: str = "default", separator: str = "/") -> str:
    """The store key of a chunk (zarr v3 ``default`` or ``v2`` chunk key encoding)."""
    if encoding == "default":
        return separator.join(["c", *map(str, coords)])
    return separator.join(map(str, coords)) if coords else "0"


def optional_type(inner: JSON, name: str = "optional") -> JSON:
    """The ``optional`` data type around ``inner`` (a type name or another optional)."""
    inner_json = inner if isinstance(inner, dict) else {"name": inner, "configuration": {}}
    return {"name": name, "configuration": inner_json}


def optional_numpy(inner: np.dtype, depth: int = 1) -> np.dtype:
    """The in-memory (value, valid) records of an optional type ``depth`` levels deep."""
    dtype = np.dtype(inner)
    for _ in range(depth):
        dtype = np.dtype([("value", dtype), ("valid", "?")])
    return dtype


# -- codec JSON ----------------------------------------------------------------------


def c_bytes(endian: str | None = "little") -> JSON:
    return {"name": "bytes"} if endian is None else {"name": "bytes",
                                                     "configuration": {"endian": endian}}


def c_gzip(level: int = 1) -> JSON:
    return {"name": "gzip", "configuration": {"level": level}}


def c_zstd(level: int = 1) -> JSON:
    return {"name": "zstd", "configuration": {"level": level, "checksum": False}}


def c_crc32c() -> JSON:
    return {"name": "crc32c"}


def c_shuffle(element_size: int) -> JSON:
    return {"name": "shuffle", "configuration": {"element_size": element_size}}


def c_transpose(order: Sequence[int]) -> JSON:
    return {"name": "transpose", "configuration": {"order": list(order)}}


def c_packbits() -> JSON:
    return {"name": "packbits"}


def c_conditional(codecs: list[JSON], header_bits: int | None = None,
                  name: str = "conditional") -> JSON:
    configuration: dict[str, JSON] = {"codecs": codecs}
    if header_bits is not None:
        configuration["header_bits"] = header_bits
    return {"name": name, "configuration": configuration}


def c_sharding(chunk_shape: Sequence[int], codecs: list[JSON],
               index_codecs: list[JSON] | None = None,
               index_location: str | None = "end") -> JSON:
    configuration: dict[str, JSON] = {
        "chunk_shape": list(chunk_shape),
        "codecs": codecs,
        "index_codecs": index_codecs if index_codecs is not None else [c_bytes(), c_crc32c()],
    }
    if index_location is not None:
        configuration["index_location"] = index_location
    return {"name": "sharding_indexed", "configuration": configuration}


def c_optional(mask_codecs: list[JSON], data_codecs: list[JSON],
               name: str = "optional") -> JSON:
    return {"name": name, "configuration": {"mask_codecs": mask_codecs,
                                            "data_codecs": data_codecs}}


def c_pad(location: str, nbytes: int, padding: bytes | None = None) -> JSON:
    configuration: dict[str, JSON] = {"location": location, "nbytes": nbytes}
    if padding is not None:
        configuration["padding"] = base64.b64encode(padding).decode("ascii")
    return {"name": "pad", "configuration": configuration}


def c_scale_offset(offset: JSON = None, scale: JSON = None) -> JSON:
    configuration = {k: v for k, v in (("offset", offset), ("scale", scale)) if v is not None}
    if not configuration:
        return {"name": "scale_offset"}
    return {"name": "scale_offset", "configuration": configuration}


def c_cast_value(data_type: str, **configuration: JSON) -> JSON:
    return {"name": "cast_value", "configuration": {"data_type": data_type, **configuration}}


# -- byte layouts --------------------------------------------------------------------


def crc32c(data: bytes) -> bytes:
    """zarr's ``crc32c`` codec: the data, then its CRC-32C as a little-endian u32."""
    return data + struct.pack("<I", google_crc32c.value(data))


def gzip(data: bytes, level: int = 1) -> bytes:
    """A gzip member with mtime 0 (deterministic)."""
    return _gzip.compress(data, compresslevel=level, mtime=0)


def zstd(data: bytes, level: int = 1) -> bytes:
    return bytes(numcodecs.Zstd(level=level).encode(data))


def shuffle(data: bytes, element_size: int) -> bytes:
    """Byte shuffle: byte ``j`` of every element into plane ``j``; a partial element last."""
    raw = np.frombuffer(data, np.uint8)
    whole = raw.size // element_size * element_size
    planes = raw[:whole].reshape(-1, element_size).T.ravel()
    return planes.tobytes() + raw[whole:].tobytes()


def packbits(mask: np.ndarray) -> bytes:
    """Registry ``packbits`` of a bool array: one bit each in C order, bit 0 = LSB of byte 0."""
    return np.packbits(np.asarray(mask, bool).reshape(-1), bitorder="little").tobytes()


def bytes_codec(values: np.ndarray, endian: str | None = "little") -> bytes:
    """zarr's ``bytes`` codec: the elements in C order, in ``endian`` byte order."""
    values = np.ascontiguousarray(values)
    if values.dtype.itemsize == 1 or values.dtype.kind == "b":
        return values.tobytes()
    order: Literal["<", ">"] = "<" if endian == "little" else ">"
    return values.astype(values.dtype.newbyteorder(order)).tobytes()


def conditional_header(mask: int, header_bits: int) -> bytes:
    """Spec 000: the mask as ``header_bits / 8`` bytes, bit ``i`` = codec ``i``, LSB first."""
    return mask.to_bytes(header_bits // 8, "little")


def n5_header(block_shape: Sequence[int]) -> bytes:
    """An N5 default-mode block header: mode 0, ndim, then each size (big-endian)."""
    return struct.pack(f">HH{len(block_shape)}I", 0, len(block_shape), *block_shape)


# -- a reference encoder for codec chains ----------------------------------------------


@dataclass
class Runtime:
    """What metadata does not say: which masks a conditional codec applies, per chunk.

    ``mask(coords)`` gives the mask of the chunk (or inner chunk: array-wide inner
    chunk coordinates) at ``coords``; ``empty_optional`` is how an optional chunk with
    no present element stores its data section: ``"spec"`` (the data chain applied to
    nothing) or ``"zero-length"``.
    """

    mask: Callable[[tuple[int, ...]], int] = lambda coords: 0
    empty_optional: str = "spec"


def _is_fill(chunk: np.ndarray, fill: Any) -> bool:
    if chunk.dtype.names:
        return bool(all(_is_fill(chunk[n], fill[n]) for n in chunk.dtype.names))
    if chunk.dtype.kind == "f" and np.isnan(fill):
        return bool(np.isnan(chunk).all())
    if chunk.dtype.kind == "f":
        return bool(((chunk == fill) & (np.signbit(chunk) == np.signbit(fill))).all())
    return bool((chunk == fill).all())


def fill_scalar(dtype: np.dtype, fill_json: JSON) -> Any:
    """The fill value as a numpy scalar (a one-element record for optional types)."""
    if dtype.names:
        out = np.zeros((), dtype)
        if fill_json is not None:
            out["valid"] = True
            out["value"] = fill_scalar(dtype["value"], fill_json[0])
        return out[()]
    if isinstance(fill_json, str) and fill_json.startswith("0x"):
        bits = int(fill_json, 16)
        unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
        return np.array(bits, unsigned).view(dtype)[()]
    names = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    return dtype.type(names.get(fill_json, fill_json))


def full(shape: Sequence[int], dtype: np.dtype, fill: Any) -> np.ndarray:
    out = np.empty(tuple(shape), dtype)
    out[...] = fill
    return out


def chunks_of(values: np.ndarray, chunk_shape: Sequence[int], fill: Any
              ) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """Every chunk of ``values`` (C order of the grid), full-size, edge padded with ``fill``."""
    grid = [math.ceil(s / c) for s, c in zip(values.shape, chunk_shape, strict=True)]
    for coords in itertools.product(*map(range, grid)):
        chunk = full(chunk_shape, values.dtype, fill)
        src = tuple(slice(i * c, min((i + 1) * c, s))
                    for i, c, s in zip(coords, chunk_shape, values.shape, strict=True))
        chunk[tuple(slice(0, s.stop - s.start) for s in src)] = values[src]
        yield coords, chunk


def encode_chain(codecs: Sequence[JSON], chunk: np.ndarray, *, fill: Any,
                 coords: tuple[int, ...], runtime: Runtime) -> bytes:
    """``chunk`` (an array) through a whole codec chain, as a writer following the specs."""
    value: Any = chunk
    for codec in codecs:
        name = codec["name"]
        config = codec.get("configuration", {})
        if isinstance(value, np.ndarray):
            value = _array_step(name, config, value, fill=fill, coords=coords, runtime=runtime)
        else:
            value = _bytes_step(name, config, value, coords=coords, runtime=runtime)
    assert isinstance(value, bytes), f"chain {codecs} ends in an array"
    return value


def _array_step(name: str, config: dict[str, JSON], value: np.ndarray, *, fill: Any,
                coords: tuple[int, ...], runtime: Runtime) -> np.ndarray | bytes:
    if name == "transpose":
        return np.ascontiguousarray(np.transpose(value, config["order"]))
    if name == "bytes":
        return bytes_codec(value, config.get("endian"))
    if name == "packbits":
        assert value.dtype == bool, "the corpus packs bool masks only"
        assert not config, "the corpus uses packbits' defaults only"
        return packbits(value)
    if name == "scale_offset":
        return numeric.scale_offset_encode(value, config.get("offset", 0), config.get("scale", 1))
    if name == "cast_value":
        return numeric.cast_array(
            value, config["data_type"], rounding=config.get("rounding", "nearest-even"),
            out_of_range=config.get("out_of_range"),
            scalar_map=[tuple(p) for p in config.get("scalar_map", {}).get("encode", [])])
    if name == "sharding_indexed":
        return encode_shard(value, config, fill=fill, shard_coords=coords, runtime=runtime)
    if name in ("optional", "zarrs.optional"):
        return encode_optional(value, config, coords=coords, runtime=runtime)
    raise ValueError(f"no array step {name!r}")


def _bytes_step(name: str, config: dict[str, JSON], value: bytes, *,
                coords: tuple[int, ...], runtime: Runtime) -> bytes:
    if name == "gzip":
        return gzip(value, config.get("level", 1))
    if name == "zstd":
        return zstd(value, config.get("level", 1))
    if name == "crc32c":
        return crc32c(value)
    if name == "shuffle":
        return shuffle(value, config["element_size"])
    if name == "pad":
        padding = base64.b64decode(config["padding"]) if "padding" in config else bytes(
            config["nbytes"])
        return padding + value if config["location"] == "start" else value + padding
    if name in ("conditional", "optional"):
        nested = config["codecs"]
        header_bits = config.get("header_bits", -(-len(nested) // 8) * 8)
        mask = runtime.mask(coords)
        payload = value
        for i, inner in enumerate(nested):
            if mask >> i & 1:
                payload = _bytes_step(inner["name"], inner.get("configuration", {}), payload,
                                      coords=coords, runtime=runtime)
        return conditional_header(mask, header_bits) + payload
    raise ValueError(f"no bytes step {name!r}")


def index_nbytes(index_codecs: Sequence[JSON], chunks_per_shard: Sequence[int]) -> int:
    dummy = np.zeros((*chunks_per_shard, 2), np.uint64)
    return len(encode_chain(index_codecs, dummy, fill=0, coords=(), runtime=Runtime()))


def assemble_shard(encoded: Mapping[tuple[int, ...], bytes], chunks_per_shard: Sequence[int],
                   *, index_codecs: Sequence[JSON], index_location: str = "end",
                   order: Sequence[tuple[int, ...]] | None = None,
                   gap_before: Mapping[tuple[int, ...], bytes] | None = None,
                   tail: bytes = b"", entries: Mapping[tuple[int, ...], tuple[int, int]]
                   | None = None) -> bytes:
    """A shard: inner chunks in ``order`` (default C order), optional unused bytes, index.

    ``gap_before[c]`` is written just before inner chunk ``c`` (unused space), ``tail``
    after the last chunk; ``entries`` overrides index entries (offset, nbytes) as given.
    Inner chunks missing from ``encoded`` are empty (both entries ``2^64 - 1``).
    """
    index = np.full((*chunks_per_shard, 2), U64_MAX, np.uint64)
    start = index_nbytes(index_codecs, chunks_per_shard) if index_location == "start" else 0
    body = bytearray()
    for c in order if order is not None else sorted(encoded):
        body += (gap_before or {}).get(c, b"")
        index[c] = (start + len(body), len(encoded[c]))
        body += encoded[c]
    body += tail
    for c, (offset, nbytes) in (entries or {}).items():
        index[c] = (offset, nbytes)
    index_bytes = encode_chain(index_codecs, index, fill=0, coords=(), runtime=Runtime())
    return index_bytes + bytes(body) if index_location == "start" else bytes(body) + index_bytes


def encode_shard(shard: np.ndarray, config: Mapping[str, JSON], *, fill: Any,
                 shard_coords: tuple[int, ...], runtime: Runtime) -> bytes:
    """A shard as the corpus' given write order: C order, dense, fill-valued chunks left out."""
    inner_shape = config["chunk_shape"]
    cps = [s // c for s, c in zip(shard.shape, inner_shape, strict=True)]
    encoded: dict[tuple[int, ...], bytes] = {}
    for c, inner in chunks_of(shard, inner_shape, fill):
        if _is_fill(inner, fill):
            continue
        global_coords = tuple(s * n + i for s, n, i in zip(shard_coords, cps, c, strict=True))
        encoded[c] = encode_chain(config["codecs"], inner, fill=fill, coords=global_coords,
                                  runtime=runtime)
    return assemble_shard(encoded, cps, index_codecs=config["index_codecs"],
                          index_location=config.get("index_location", "end"))


def encode_optional(chunk: np.ndarray, config: Mapping[str, JSON], *,
                    coords: tuple[int, ...], runtime: Runtime) -> bytes:
    """Spec 003: u64 LE mask length, u64 LE data length, encoded mask, encoded data."""
    valid = np.ascontiguousarray(chunk["valid"])
    present = np.ascontiguousarray(chunk["value"].reshape(-1)[valid.reshape(-1)])
    inner_fill = np.zeros((), present.dtype)[()]
    mask_bytes = encode_chain(config["mask_codecs"], valid, fill=False, coords=coords,
                              runtime=runtime)
    if present.size == 0 and runtime.empty_optional == "zero-length":
        data_bytes = b""
    else:
        data_bytes = encode_chain(config["data_codecs"], present, fill=inner_fill,
                                  coords=coords, runtime=runtime)
    return struct.pack("<QQ", len(mask_bytes), len(data_bytes)) + mask_bytes + data_bytes


def numpy_dtype(data_type: JSON) -> np.dtype:
    """The in-memory dtype of a zarr v3 data type (optional types as (value, valid))."""
    if isinstance(data_type, dict) and data_type["name"] not in ("optional", "zarrs.optional"):
        return numpy_dtype(data_type["name"])
    if isinstance(data_type, dict):
        inner = numpy_dtype(data_type["configuration"])
        return np.dtype([("value", inner), ("valid", "?")])
    if data_type == "bool":
        return np.dtype(bool)
    return np.dtype(data_type)


def encode_array(metadata: Mapping[str, JSON], values: np.ndarray, *,
                 runtime: Runtime | None = None, keep_fill_chunks: bool = False,
                 ) -> dict[str, bytes]:
    """Every chunk of ``values`` stored as a writer following the specs stores it.

    Chunks equal to the fill value everywhere are left out (as zarr writers do by
    default), unless ``keep_fill_chunks``.
    """
    runtime = runtime or Runtime()
    dtype = numpy_dtype(metadata["data_type"])
    assert values.dtype == dtype, (values.dtype, dtype)
    fill = fill_scalar(dtype, metadata["fill_value"])
    encoding = metadata["chunk_key_encoding"]
    objects = {}
    for coords, chunk in chunks_of(values, metadata["chunk_grid"]["configuration"]["chunk_shape"],
                                   fill):
        if not keep_fill_chunks and _is_fill(chunk, fill):
            continue
        key = chunk_key(coords, encoding["name"], encoding["configuration"]["separator"])
        objects[key] = encode_chain(metadata["codecs"], chunk, fill=fill, coords=coords,
                                    runtime=runtime)
    return objects


def dump_json(value: JSON) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


# -- case shorthands -------------------------------------------------------------------


def read_case(spec: str, id: str, section: str, clause: str, description: str,
              metadata: dict[str, JSON], values: np.ndarray, *,
              runtime: Runtime | None = None, objects: dict[str, bytes] | None = None,
              **fields: Any) -> Case:
    """A read case whose stored objects are ``values`` encoded (unless ``objects``)."""
    if objects is None:
        objects = encode_array(metadata, values, runtime=runtime)
    return Case(id=id, spec=spec, section=section, clause=clause, kind="read",
                description=description, metadata=metadata, objects=objects,
                expected=values, **fields)


def refuse_case(spec: str, id: str, section: str, clause: str, description: str,
                metadata: dict[str, JSON], because: str, *,
                objects: dict[str, bytes] | None = None, operation: str = "read",
                input: np.ndarray | None = None, **fields: Any) -> Case:
    fields.setdefault("cause", causes.CAUSES.get(id, ""))
    return Case(id=id, spec=spec, section=section, clause=clause, kind="refuse",
                description=description, metadata=metadata, objects=objects or {},
                because=because, operation=operation, input=input, **fields)


def write_case(spec: str, id: str, section: str, clause: str, description: str,
               metadata: dict[str, JSON], input: np.ndarray, *,
               runtime: Runtime | None = None, writer: dict[str, JSON] | None = None,
               expected_objects: dict[str, bytes] | None = None,
               selection: list[list[int]] | None = None, **fields: Any) -> Case:
    """A write case: ``input`` written into ``selection`` (all of the array by default)."""
    if expected_objects is None:
        dtype = numpy_dtype(metadata["data_type"])
        stored = full(metadata["shape"], dtype, fill_scalar(dtype, metadata["fill_value"]))
        region = (tuple(slice(a, b) for a, b in selection) if selection is not None
                  else (Ellipsis,))
        stored[region] = input
        expected_objects = encode_array(metadata, stored, runtime=runtime)
        _every_chunk_written(metadata, expected_objects)
    if metadata["codecs"][-1]["name"] == "sharding_indexed" and "compare" not in fields:
        fields["compare"] = SHARD_COMPARE
    # Chunks (and inner chunks) equal to the fill value everywhere are not stored, as
    # zarr writers do by default; no write case depends on it at the chunk level.
    writer = {"write_empty_chunks": False, **(writer or {})}
    return Case(id=id, spec=spec, section=section, clause=clause, kind="write",
                description=description, metadata=metadata, input=input,
                expected_objects=expected_objects, selection=selection,
                writer=writer, **fields)


SHARD_COMPARE = {
    "mode": "shard",
    "why": "spec 001: all write orders are valid. Each stored shard must hold the index at "
           "index_location, encoded by index_codecs, and every inner chunk's bytes as in "
           "expected/ (which lays them out in C order, dense); inner chunks expected empty "
           "must be empty entries. Nested shards compare the same way.",
}


def _every_chunk_written(metadata: Mapping[str, JSON], objects: Mapping[str, bytes]) -> None:
    """Write cases keep every chunk: which keys a writer skips is no spec's business."""
    shape = metadata["shape"]
    chunks = metadata["chunk_grid"]["configuration"]["chunk_shape"]
    n = math.prod(math.ceil(s / c) for s, c in zip(shape, chunks, strict=True))
    assert len(objects) == n, f"write case leaves {n - len(objects)} chunks out"


def masks_runtime(masks: np.ndarray) -> Runtime:
    """Masks given per chunk (an array shaped like the chunk grid, or the inner-chunk grid)."""
    return Runtime(mask=lambda coords: int(masks[coords]))
