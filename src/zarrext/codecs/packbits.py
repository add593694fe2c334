"""``packbits``: pack array elements into a fixed number of bits each.

Registry spec (zarr-extensions ``codecs/packbits``): every element is encoded as
``k`` bits, bits ``first_bit..last_bit`` of its little-endian representation (for
complex types, of each of the two components). Element ``i`` occupies bits
``[i*k, (i+1)*k)`` of a stream whose bit 0 is the least-significant bit of byte 0;
the stream is zero-padded to whole bytes. ``padding_encoding`` optionally adds one
byte, before (``first_byte``) or after (``last_byte``) the stream, holding the
number of padding bits. Decoding shifts the bits back to ``first_bit`` and
sign-extends signed integers (zero-extends everything else).

The registry's README (the normative text) spells the options
``first_byte``/``last_byte`` and ``first_bit``/``last_bit``, as zarrs does; its JSON
schema spells them ``start_byte``/``end_byte`` and ``start_bit``/``end_bit``. Both
spellings are read. A codec built in Python writes the README's spelling (zarrs
refuses the schema's); a codec read from metadata writes back the spelling it was
read with, so rewriting someone else's ``zarr.json`` does not change it.

zarr-python 3.4.2 has no sub-byte data types (int2, int4, float4, ...), so the
supported types are bool, the 8- to 64-bit integers, float16/32/64 and
complex64/128 (the spec's ``complex_float32``/``complex_float64``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

import numpy as np
from zarr.abc.codec import ArrayBytesCodec
from zarr.core.common import JSON, parse_named_configuration
from zarr.core.dtype import (
    Bool,
    Complex64,
    Complex128,
    Float16,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
)

from zarrext.codecs.chunk_context import current_chunk_index, describe_chunk

if TYPE_CHECKING:
    from typing import Self

    import numpy.typing as npt
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar, ZDType
    from zarr.core.metadata.v3 import ChunkGridMetadata

__all__ = ["PackBitsCodec", "PackBitsCodecError"]

PaddingEncoding = Literal["none", "first_byte", "last_byte"]
Spelling = Literal["start_end", "first_last"]

# Spelling of each padding encoding and bit-range key, per spelling style.
_PADDING_NAMES: Final[dict[Spelling, dict[PaddingEncoding, str]]] = {
    "start_end": {"none": "none", "first_byte": "start_byte", "last_byte": "end_byte"},
    "first_last": {"none": "none", "first_byte": "first_byte", "last_byte": "last_byte"},
}
_BIT_KEYS: Final[dict[Spelling, tuple[str, str]]] = {
    "start_end": ("start_bit", "end_bit"),
    "first_last": ("first_bit", "last_bit"),
}
_PADDING_ALIASES: Final[dict[str, PaddingEncoding]] = {
    "none": "none",
    "first_byte": "first_byte",
    "start_byte": "first_byte",
    "last_byte": "last_byte",
    "end_byte": "last_byte",
}

# Data type class -> (bits per component, components, signed).
_LAYOUTS: Final[dict[type, tuple[int, int, bool]]] = {
    Bool: (1, 1, False),
    Int8: (8, 1, True),
    Int16: (16, 1, True),
    Int32: (32, 1, True),
    Int64: (64, 1, True),
    UInt8: (8, 1, False),
    UInt16: (16, 1, False),
    UInt32: (32, 1, False),
    UInt64: (64, 1, False),
    Float16: (16, 1, False),
    Float32: (32, 1, False),
    Float64: (64, 1, False),
    Complex64: (32, 2, False),
    Complex128: (64, 2, False),
}

# Elements per block in the general (not byte-aligned) path: a multiple of 8, so
# every block's bit stream is whole bytes, and small enough that the per-bit
# working array (N bytes per component) stays a few tens of MiB.
_BLOCK = 1 << 16


class PackBitsCodecError(ValueError):
    """A packbits configuration or encoded chunk that cannot be accepted."""


def _layout(dtype: ZDType[TBaseDType, TBaseScalar]) -> tuple[int, int, bool]:
    layout = _LAYOUTS.get(type(dtype))
    if layout is None:
        supported = ", ".join(sorted(c.__name__ for c in _LAYOUTS))
        raise PackBitsCodecError(
            f"packbits: data type {dtype} is not supported (supported: {supported})"
        )
    return layout


def _parse_bit(value: object, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PackBitsCodecError(f"packbits: {key} must be a non-negative integer or null, "
                                 f"got {value!r}")
    return value


def _parse_padding(value: object) -> PaddingEncoding:
    if isinstance(value, str) and value in _PADDING_ALIASES:
        return _PADDING_ALIASES[value]
    raise PackBitsCodecError(
        f"packbits: padding_encoding must be one of {sorted(_PADDING_ALIASES)}, got {value!r}"
    )


@dataclass(frozen=True)
class PackBitsCodec(ArrayBytesCodec):
    """Array->bytes codec storing each element in ``last_bit - first_bit + 1`` bits.

    Parameters
    ----------
    padding_encoding : {"none", "first_byte", "last_byte"}
        Whether (and where) one byte recording the number of padding bits is added.
        ``"start_byte"``/``"end_byte"`` are accepted as synonyms.
    first_bit, last_bit : int, optional
        Inclusive range of bits (0 = least significant) kept of each component.
        Defaults: all bits.
    spelling : {"first_last", "start_end"}
        Which of the registry's two spellings ``to_dict`` writes: the README's
        ``first_*``/``last_*`` (default) or the JSON schema's ``start_*``/``end_*``.
    """

    is_fixed_size = True

    padding_encoding: PaddingEncoding = "none"
    first_bit: int | None = None
    last_bit: int | None = None
    # How the metadata is spelled, not what it means: no part of equality.
    spelling: Spelling = field(default="first_last", compare=False)

    def __init__(
        self,
        *,
        padding_encoding: str = "none",
        first_bit: int | None = None,
        last_bit: int | None = None,
        spelling: Spelling = "first_last",
    ) -> None:
        if spelling not in _BIT_KEYS:
            raise PackBitsCodecError(f"packbits: unknown spelling {spelling!r}")
        first = _parse_bit(first_bit, "first_bit")
        last = _parse_bit(last_bit, "last_bit")
        if first is not None and last is not None and last < first:
            raise PackBitsCodecError(
                f"packbits: last_bit ({last}) must not be less than first_bit ({first})"
            )
        object.__setattr__(self, "padding_encoding", _parse_padding(padding_encoding))
        object.__setattr__(self, "first_bit", first)
        object.__setattr__(self, "last_bit", last)
        object.__setattr__(self, "spelling", spelling)

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, "packbits", require_configuration=False)
        configuration = dict(configuration or {})
        spellings = {
            "first_last" if key in ("first_bit", "last_bit") else "start_end"
            for key in configuration
            if key in ("first_bit", "last_bit", "start_bit", "end_bit")
        }
        padding = configuration.pop("padding_encoding", "none")
        if padding in ("first_byte", "last_byte"):
            spellings.add("first_last")
        elif padding in ("start_byte", "end_byte"):
            spellings.add("start_end")
        if len(spellings) > 1:
            raise PackBitsCodecError(
                "packbits: configuration mixes the first_*/last_* and start_*/end_* spellings: "
                f"{data.get('configuration')!r}"
            )
        spelling: Spelling = "start_end" if "start_end" in spellings else "first_last"
        first_key, last_key = _BIT_KEYS[spelling]
        first = configuration.pop(first_key, None)
        last = configuration.pop(last_key, None)
        if configuration:
            raise PackBitsCodecError(
                f"packbits: unknown configuration keys {sorted(configuration)}"
            )
        return cls(
            padding_encoding=padding,  # type: ignore[arg-type]
            first_bit=first,  # type: ignore[arg-type]
            last_bit=last,  # type: ignore[arg-type]
            spelling=spelling,
        )

    def to_dict(self) -> dict[str, JSON]:
        configuration: dict[str, JSON] = {}
        if self.padding_encoding != "none":
            configuration["padding_encoding"] = _PADDING_NAMES[self.spelling][
                self.padding_encoding
            ]
        first_key, last_key = _BIT_KEYS[self.spelling]
        if self.first_bit is not None:
            configuration[first_key] = self.first_bit
        if self.last_bit is not None:
            configuration[last_key] = self.last_bit
        if not configuration:
            return {"name": "packbits"}
        return {"name": "packbits", "configuration": configuration}

    # -- geometry -------------------------------------------------------------

    def bit_range(self, dtype: ZDType[TBaseDType, TBaseScalar]) -> tuple[int, int]:
        """``(first_bit, bits per component)`` for ``dtype``, validated."""
        n_bits, _, _ = _layout(dtype)
        first = 0 if self.first_bit is None else self.first_bit
        last = n_bits - 1 if self.last_bit is None else self.last_bit
        if last >= n_bits or first > last:
            raise PackBitsCodecError(
                f"packbits: bits {first}..{last} are outside the {n_bits} bits of {dtype}"
            )
        return first, last - first + 1

    def bits_per_element(self, dtype: ZDType[TBaseDType, TBaseScalar]) -> int:
        """``k``: encoded bits per array element."""
        _, b = self.bit_range(dtype)
        return b * _layout(dtype)[1]

    def encoded_nbytes(self, n_elements: int, dtype: ZDType[TBaseDType, TBaseScalar]) -> int:
        """Size of an encoded chunk of ``n_elements`` elements."""
        stream = -(-n_elements * self.bits_per_element(dtype) // 8)
        return stream + (self.padding_encoding != "none")

    def validate(
        self,
        *,
        shape: tuple[int, ...],
        dtype: ZDType[TBaseDType, TBaseScalar],
        chunk_grid: ChunkGridMetadata,
    ) -> None:
        self.bit_range(dtype)

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        return self

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        n_elements = int(np.prod(chunk_spec.shape, dtype=np.int64))
        return self.encoded_nbytes(n_elements, chunk_spec.dtype)

    # -- encode ---------------------------------------------------------------

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        dtype = chunk_spec.dtype
        values = np.asarray(chunk_array.as_numpy_array()).ravel()
        stream = pack(values, dtype, self)
        return chunk_spec.prototype.buffer.from_bytes(self._add_padding(stream, values.size, dtype))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        return self._encode_sync(chunk_array, chunk_spec)

    def _add_padding(
        self, stream: bytes, n_elements: int, dtype: ZDType[TBaseDType, TBaseScalar]
    ) -> bytes:
        if self.padding_encoding == "none":
            return stream
        pad = bytes([len(stream) * 8 - n_elements * self.bits_per_element(dtype)])
        return pad + stream if self.padding_encoding == "first_byte" else stream + pad

    # -- decode ---------------------------------------------------------------

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        dtype = chunk_spec.dtype
        n_elements = int(np.prod(chunk_spec.shape, dtype=np.int64))
        raw = chunk_bytes.as_numpy_array().view(np.uint8).ravel()
        stream = self._strip_padding(raw, n_elements, dtype)
        values = unpack(stream, n_elements, dtype, self)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(values.reshape(chunk_spec.shape))

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def _strip_padding(
        self, raw: npt.NDArray[np.uint8], n_elements: int, dtype: ZDType[TBaseDType, TBaseScalar]
    ) -> npt.NDArray[np.uint8]:
        where = describe_chunk(current_chunk_index())
        k = self.bits_per_element(dtype)
        expected = self.encoded_nbytes(n_elements, dtype)
        if raw.size != expected:
            raise PackBitsCodecError(
                f"packbits codec, {where}: {raw.size} bytes, expected {expected} for "
                f"{n_elements} elements of {k} bits"
                + ("" if self.padding_encoding == "none" else " plus the padding byte")
            )
        if self.padding_encoding == "none":
            return raw
        if self.padding_encoding == "first_byte":
            pad, stream = int(raw[0]), raw[1:]
        else:
            pad, stream = int(raw[-1]), raw[:-1]
        if pad != stream.size * 8 - n_elements * k:
            raise PackBitsCodecError(
                f"packbits codec, {where}: padding byte says {pad} padding bits, but "
                f"{n_elements} elements of {k} bits in {stream.size} bytes leave "
                f"{stream.size * 8 - n_elements * k}"
            )
        return stream


# -- the bit work, on numpy arrays ---------------------------------------------


def _little_endian(dtype: ZDType[TBaseDType, TBaseScalar]) -> np.dtype[np.generic]:
    native = dtype.to_native_dtype()
    return native.newbyteorder("<") if native.itemsize > 1 else native


def pack(
    values: npt.NDArray[np.generic], dtype: ZDType[TBaseDType, TBaseScalar], codec: PackBitsCodec
) -> bytes:
    """The bit stream (without padding byte) of ``values``, a 1-D array of ``dtype``."""
    n_bits, n_comp, _ = _layout(dtype)
    first, b = codec.bit_range(dtype)
    if isinstance(dtype, Bool):
        return np.packbits(values.astype(np.bool_, copy=False), bitorder="little").tobytes()
    little = values.astype(_little_endian(dtype), copy=False)
    if first == 0 and b == n_bits:
        # every bit kept: the stream is the little-endian bytes themselves
        return np.ascontiguousarray(little).tobytes()
    width = n_bits // 8
    comp_bytes = np.ascontiguousarray(little).view(np.uint8).reshape(-1, width)
    out = bytearray()
    step = _BLOCK * n_comp
    for start in range(0, comp_bytes.shape[0], step):
        bits = np.unpackbits(comp_bytes[start : start + step], axis=1, bitorder="little")
        out += np.packbits(bits[:, first : first + b], bitorder="little").tobytes()
    return bytes(out)


def unpack(
    stream: npt.NDArray[np.uint8],
    n_elements: int,
    dtype: ZDType[TBaseDType, TBaseScalar],
    codec: PackBitsCodec,
) -> npt.NDArray[np.generic]:
    """``n_elements`` values of ``dtype`` from a bit stream already checked for length."""
    n_bits, n_comp, signed = _layout(dtype)
    first, b = codec.bit_range(dtype)
    native = dtype.to_native_dtype()
    if isinstance(dtype, Bool):
        return np.unpackbits(stream, count=n_elements, bitorder="little").view(np.bool_)
    little = _little_endian(dtype)
    if first == 0 and b == n_bits:
        return stream.view(little).astype(native, copy=False)
    width = n_bits // 8
    n_comp_total = n_elements * n_comp
    comp_bytes = np.empty((n_comp_total, width), dtype=np.uint8)
    step = _BLOCK * n_comp
    bits = np.zeros((min(step, n_comp_total), n_bits), dtype=np.uint8)
    for start in range(0, n_comp_total, step):
        m = min(step, n_comp_total - start)
        block = stream[start * b // 8 : -(-(start + m) * b // 8)]
        chunk_bits = np.unpackbits(block, count=m * b, bitorder="little").reshape(m, b)
        view = bits[:m]
        view[:, first : first + b] = chunk_bits
        if signed and first + b < n_bits:
            # sign-extend from the highest stored bit
            view[:, first + b :] = chunk_bits[:, b - 1 : b]
        comp_bytes[start : start + m] = np.packbits(view, axis=1, bitorder="little")
    return comp_bytes.reshape(-1).view(little).astype(native, copy=False)

