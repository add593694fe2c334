"""``optional``: the array->bytes codec of the nullable ``optional`` data type.

Encoded chunk::

    u64 LE  mask length  (bytes of the encoded mask)
    u64 LE  data length  (bytes of the encoded data)
    encoded mask         the chunk's validity (bool, chunk shape) through mask_codecs
    encoded data         the present elements only, 1-D in C order, of the inner
                         data type, through data_codecs

A nested optional data type is encoded by an ``optional`` codec inside
``data_codecs``.

A chunk with no present element: spec 003 defines the data section as the data
codecs applied to the present values, so such a chunk holds their encoding of an
empty array (``gzip(b"")``, 20 bytes; a zstd frame of nothing; the 4 bytes of
``crc32c``; nothing for ``[bytes]``). zarrext writes that form. zarrs (0.23.8)
writes a zero-length data section instead, and never reads the data section of a
chunk whose mask marks nothing present, so it reads both forms; zarrext reads
both as well, and refuses a section that holds any element. The same holds at
zero elements for a nested level's mask section. numcodecs' zstd and blosc
decoders refuse their own encoding of zero bytes: there imagecodecs decodes them.

zarrs also names this codec ``zarrs.optional``; a codec read under either name
writes that name back.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import ArrayBytesCodec, BytesBytesCodec
from zarr.codecs.vlen_utf8 import VLenBytesCodec, VLenUTF8Codec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_utils import ChunkTransform, evolve_codecs
from zarr.core.codec_pipeline import codecs_from_list
from zarr.core.common import JSON
from zarr.core.dtype import Bool
from zarr.core.metadata.v3 import RegularChunkGridMetadata, parse_codecs
from zarr.registry import get_pipeline_class

from zarrext._nesting import NestingError, nested
from zarrext._zarr_compat import codec_supports_sync
from zarrext.codecs._of_nothing import reading_nothing
from zarrext.codecs.chunk_context import current_chunk_index, describe_chunk
from zarrext.codecs.packbits import PackBitsCodec
from zarrext.codecs.walk import map_nested
from zarrext.dtypes.optional import OptionalDType, is_optional_native

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Self

    from zarr.abc.codec import Codec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.dtype import ZDTypeLike
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar, ZDType
    from zarr.core.metadata.v3 import ChunkGridMetadata

__all__ = ["OptionalCodec", "OptionalCodecError"]

NAMES = ("optional", "zarrs.optional")
HEADER = struct.Struct("<QQ")


def _is_sparse(n_present: int, size: int) -> bool:
    """Whether index gathers/scatters beat boolean masks (under 1 in 8 present)."""
    return n_present * 8 < size


class OptionalCodecError(ValueError):
    """An optional-codec configuration or encoded chunk that cannot be accepted."""


def _has_elements(spec: ArraySpec) -> bool:
    return math.prod(spec.shape) > 0


def _parse_chain(data: object, key: str) -> tuple[Codec, ...]:
    if isinstance(data, str | bytes) or not hasattr(data, "__iter__"):
        raise OptionalCodecError(f"optional: {key} must be a list of codecs, got {data!r}")
    try:
        with nested("optional"):
            codecs = parse_codecs(data)
        codecs_from_list(codecs)
    except NestingError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise OptionalCodecError(f"optional: invalid {key}: {e}") from e
    return codecs


@dataclass(frozen=True)
class OptionalCodec(ArrayBytesCodec):
    """Encode an ``optional`` array as its validity mask and its present values.

    Parameters
    ----------
    mask_codecs : list of codecs or codec dicts, optional
        Chain for the mask (a bool array of the chunk's shape). Default:
        ``[packbits]``.
    data_codecs : list of codecs or codec dicts, optional
        Chain for the present values (1-D, inner data type). Default: ``[bytes]``
        (or, for a nested optional, another default ``optional`` codec).
    name : {"optional", "zarrs.optional"}
        Name written to ``zarr.json``.
    inner : ZDType or data type like, optional
        Runtime setting, never written: with it, this codec given as the serializer
        of a non-optional data type (e.g. through xarray's ``encoding``) makes the
        array ``optional<inner>`` (present values of type ``inner``).
    """

    is_fixed_size = False

    mask_codecs: tuple[Codec, ...]
    data_codecs: tuple[Codec, ...]
    name: str = "optional"
    inner: ZDType[TBaseDType, TBaseScalar] | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        *,
        mask_codecs: Iterable[Codec | dict[str, JSON]] | None = None,
        data_codecs: Iterable[Codec | dict[str, JSON]] | None = None,
        name: str = "optional",
        inner: ZDTypeLike | None = None,
    ) -> None:
        from zarr.codecs.bytes import BytesCodec
        from zarr.core.dtype import ZDType, parse_dtype

        if inner is not None and not isinstance(inner, ZDType):
            inner = parse_dtype(inner, zarr_format=3)
        object.__setattr__(self, "inner", inner)

        if name not in NAMES:
            raise OptionalCodecError(f"optional: name must be one of {NAMES}, got {name!r}")
        mask = _parse_chain([PackBitsCodec()] if mask_codecs is None else mask_codecs,
                            "mask_codecs")
        data = _parse_chain([BytesCodec()] if data_codecs is None else data_codecs,
                            "data_codecs")
        object.__setattr__(self, "mask_codecs", mask)
        object.__setattr__(self, "data_codecs", data)
        object.__setattr__(self, "name", name)

    @classmethod
    def default_for(cls, dtype: OptionalDType) -> Self:
        """The registry's recommended chains, under the data type's name.

        Mask: ``packbits`` then ``zstd``; values: zarr-python's default serializer
        for the inner type then ``zstd`` (a nested level: the nested default codec,
        compressed inside it). The ``optional`` codec is then the array's only
        codec, as the registry's text and zarrs' examples have it.
        """
        from zarr.codecs import ZstdCodec
        from zarr.core.array import default_serializer_v3

        inner = dtype.inner
        data: list[Codec] = (
            [cls.default_for(inner)] if isinstance(inner, OptionalDType)
            else [default_serializer_v3(inner), ZstdCodec()]
        )
        return cls(mask_codecs=[PackBitsCodec(), ZstdCodec()], data_codecs=data,
                   name=dtype.name)

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        name = data.get("name")
        if name not in NAMES:
            raise OptionalCodecError(f"optional: expected name in {NAMES}, got {name!r}")
        configuration = data.get("configuration")
        if not isinstance(configuration, dict):
            raise OptionalCodecError(
                f"{name}: configuration must be an object with 'mask_codecs' and "
                f"'data_codecs', got {configuration!r}"
            )
        unknown = set(configuration) - {"mask_codecs", "data_codecs"}
        missing = {"mask_codecs", "data_codecs"} - set(configuration)
        if unknown or missing:
            raise OptionalCodecError(
                f"{name}: configuration needs exactly 'mask_codecs' and 'data_codecs' "
                f"(missing {sorted(missing)}, unknown {sorted(unknown)})"
            )
        return cls(
            mask_codecs=configuration["mask_codecs"],
            data_codecs=configuration["data_codecs"],
            name=str(name),
        )

    def to_dict(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "configuration": {
                "mask_codecs": [c.to_dict() for c in self.mask_codecs],
                "data_codecs": [c.to_dict() for c in self.data_codecs],
            },
        }

    def map_nested_codecs(self, fn: Callable[[Codec], Codec]) -> Self:
        """A copy with ``fn`` applied to every codec of both chains."""
        return map_nested(self, fn, ("mask_codecs", "data_codecs"))

    # -- specs ----------------------------------------------------------------

    @staticmethod
    def _inner(dtype: ZDType[TBaseDType, TBaseScalar]) -> ZDType[TBaseDType, TBaseScalar]:
        if not isinstance(dtype, OptionalDType):
            raise OptionalCodecError(
                f"optional codec: needs the optional data type, got {dtype}"
            )
        return dtype.inner

    @staticmethod
    def mask_spec(chunk_spec: ArraySpec) -> ArraySpec:
        """Spec the mask chain sees: bool, the chunk's shape."""
        return ArraySpec(
            shape=chunk_spec.shape,
            dtype=Bool(),
            fill_value=np.False_,
            config=chunk_spec.config,
            prototype=chunk_spec.prototype,
        )

    @classmethod
    def data_spec(cls, chunk_spec: ArraySpec, n_present: int) -> ArraySpec:
        """Spec the data chain sees: ``n_present`` values of the inner type."""
        inner = cls._inner(chunk_spec.dtype)
        return ArraySpec(
            shape=(n_present,),
            dtype=inner,
            fill_value=inner.default_scalar(),
            config=chunk_spec.config,
            prototype=chunk_spec.prototype,
        )

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        if not isinstance(array_spec.dtype, OptionalDType):
            return self
        n = int(np.prod(array_spec.shape, dtype=np.int64))
        mask = evolve_codecs(self.mask_codecs, self.mask_spec(array_spec))
        data = evolve_codecs(self.data_codecs, self.data_spec(array_spec, max(n, 1)))
        if mask == self.mask_codecs and data == self.data_codecs:
            return self
        return replace(self, mask_codecs=mask, data_codecs=data)

    def validate(
        self,
        *,
        shape: tuple[int, ...],
        dtype: ZDType[TBaseDType, TBaseScalar],
        chunk_grid: ChunkGridMetadata,
    ) -> None:
        inner = self._inner(dtype)
        for chain, chain_shape, chain_dtype in (
            (self.mask_codecs, shape, Bool()),
            (self.data_codecs, (max(1, int(np.prod(shape, dtype=np.int64))),), inner),
        ):
            spec = ArraySpec(
                shape=chain_shape,
                dtype=chain_dtype,
                fill_value=chain_dtype.default_scalar(),
                config=ArrayConfig.from_dict({}),
                prototype=default_buffer_prototype(),
            )
            for codec in chain:
                codec.validate(
                    shape=spec.shape,
                    dtype=spec.dtype,
                    chunk_grid=RegularChunkGridMetadata(chunk_shape=spec.shape),
                )
                spec = codec.resolve_metadata(spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError

    # -- chains ---------------------------------------------------------------

    @property
    def _sync_capable(self) -> bool:
        return all(codec_supports_sync(c) for c in (*self.mask_codecs, *self.data_codecs))

    @cached_property
    def _mask_transform(self) -> ChunkTransform:
        return ChunkTransform(codecs=self.mask_codecs)

    @cached_property
    def _data_transform(self) -> ChunkTransform:
        return ChunkTransform(codecs=self.data_codecs)

    # -- encode ---------------------------------------------------------------

    def _split(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> tuple[
        NDBuffer, NDBuffer, ArraySpec
    ]:
        """The mask and the present values of a chunk (perhaps none: the data
        chain then encodes an empty array, as spec 003 says), as NDBuffers."""
        inner = self._inner(chunk_spec.dtype)
        array = chunk_array.as_numpy_array()
        if not is_optional_native(array.dtype):
            raise OptionalCodecError(
                f"{self.name} codec, {describe_chunk(current_chunk_index())}: expected an "
                f"optional (value/valid structured) chunk, got dtype {array.dtype}"
            )
        valid = np.ascontiguousarray(array["valid"])
        nd = chunk_spec.prototype.nd_buffer
        mask = nd.from_numpy_array(valid)
        # Both forms walk the chunk in C order whatever its memory layout; gathering
        # by index is several times faster than a boolean mask over the strided
        # field when few elements are present, and much slower when most are.
        n_present = int(np.count_nonzero(valid))
        if n_present == valid.size:
            present = array["value"].ravel(order="C")
        elif _is_sparse(n_present, valid.size):
            present = array["value"].reshape(-1)[np.flatnonzero(valid)]
        else:
            present = array["value"][valid]
        native = inner.to_native_dtype()
        if present.dtype != native:  # strings are held as objects in the structured array
            present = present.astype(native)
        return mask, nd.from_numpy_array(present), self.data_spec(chunk_spec, present.size)

    def _join(self, mask: Buffer | None, data: Buffer | None, chunk_spec: ArraySpec) -> Buffer:
        if mask is None:
            raise OptionalCodecError(f"{self.name} codec: the mask codecs produced no bytes")
        if data is None:
            raise OptionalCodecError(f"{self.name} codec: the data codecs produced no bytes")
        mask_bytes = mask.as_numpy_array().view(np.uint8).ravel()
        data_bytes = data.as_numpy_array().view(np.uint8).ravel()
        out = np.empty(HEADER.size + mask_bytes.size + data_bytes.size, dtype=np.uint8)
        out[: HEADER.size] = np.frombuffer(
            HEADER.pack(mask_bytes.size, data_bytes.size), dtype=np.uint8
        )
        out[HEADER.size : HEADER.size + mask_bytes.size] = mask_bytes
        out[HEADER.size + mask_bytes.size :] = data_bytes
        return chunk_spec.prototype.buffer.from_array_like(out)

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        mask, present, data_spec = self._split(chunk_array, chunk_spec)
        mask_bytes = self._mask_transform.encode_chunk(mask, self.mask_spec(chunk_spec))
        data_bytes = self._data_transform.encode_chunk(present, data_spec)
        return self._join(mask_bytes, data_bytes, chunk_spec)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        if self._sync_capable:
            return self._encode_sync(chunk_array, chunk_spec)
        mask, present, data_spec = self._split(chunk_array, chunk_spec)
        pipeline = get_pipeline_class()
        (mask_bytes,) = await pipeline.from_codecs(self.mask_codecs).encode(
            [(mask, self.mask_spec(chunk_spec))]
        )
        (data_bytes,) = await pipeline.from_codecs(self.data_codecs).encode(
            [(present, data_spec)]
        )
        return self._join(mask_bytes, data_bytes, chunk_spec)

    # -- decode ---------------------------------------------------------------

    def _sections(self, chunk_bytes: Buffer) -> tuple[Buffer, Buffer]:
        """The encoded mask and data of a chunk, lengths checked against its size."""
        where = f"{self.name} codec, {describe_chunk(current_chunk_index())}"
        size = len(chunk_bytes)
        if size < HEADER.size:
            raise OptionalCodecError(
                f"{where}: {size} bytes is shorter than the {HEADER.size}-byte header"
            )
        mask_len, data_len = HEADER.unpack(chunk_bytes[: HEADER.size].to_bytes())
        body = size - HEADER.size
        if mask_len > body:
            raise OptionalCodecError(
                f"{where}: mask length {mask_len} exceeds the {body} bytes after the header"
            )
        if data_len > body - mask_len:
            raise OptionalCodecError(
                f"{where}: data length {data_len} exceeds the {body - mask_len} bytes after "
                f"the {mask_len}-byte mask"
            )
        if mask_len + data_len != body:
            raise OptionalCodecError(
                f"{where}: mask length {mask_len} + data length {data_len} leave "
                f"{body - mask_len - data_len} trailing bytes"
            )
        start = HEADER.size
        return (
            chunk_bytes[start : start + mask_len],
            chunk_bytes[start + mask_len : start + mask_len + data_len],
        )

    def _check_mask(self, mask: NDBuffer | None, chunk_spec: ArraySpec) -> np.ndarray[Any, Any]:
        where = f"{self.name} codec, {describe_chunk(current_chunk_index())}"
        if mask is None:
            raise OptionalCodecError(f"{where}: the mask codecs decoded nothing")
        array = mask.as_numpy_array()
        if array.shape != chunk_spec.shape:
            raise OptionalCodecError(
                f"{where}: decoded mask has shape {array.shape}, expected {chunk_spec.shape}"
            )
        return array.astype(np.bool_, copy=False)

    def _present_values(
        self, values: NDBuffer | None, n: int, chunk_spec: ArraySpec
    ) -> np.ndarray[Any, Any] | None:
        """The ``n`` decoded present values as a 1-D array (None when ``n`` is 0)."""
        where = f"{self.name} codec, {describe_chunk(current_chunk_index())}"
        if values is None:
            raise OptionalCodecError(f"{where}: the data codecs decoded nothing")
        present = values.as_numpy_array()
        if present.shape != (n,):
            raise OptionalCodecError(
                f"{where}: the data section holds {present.size} elements, but the mask "
                f"marks {n} present"
            )
        return present if n else None

    def _assemble(
        self, mask: np.ndarray[Any, Any], present: np.ndarray[Any, Any] | None, n: int,
        chunk_spec: ArraySpec,
    ) -> NDBuffer:
        out: np.ndarray[Any, Any] = np.zeros(
            chunk_spec.shape, dtype=chunk_spec.dtype.to_native_dtype()
        )
        sparse = _is_sparse(n, mask.size)
        index = np.flatnonzero(mask) if sparse else None
        if index is not None:
            out.reshape(-1)["valid"][index] = True
        else:
            out["valid"] = mask
        if present is not None:
            if index is not None:
                out.reshape(-1)["value"][index] = present
            elif n == mask.size:
                out["value"] = present.reshape(mask.shape)
            else:
                out["value"][mask] = present
        return chunk_spec.prototype.nd_buffer.from_numpy_array(out)

    def _data_error(self, e: Exception, n: int, data: Buffer) -> OptionalCodecError:
        where = f"{self.name} codec, {describe_chunk(current_chunk_index())}"
        if not n:
            return OptionalCodecError(
                f"{where}: the mask marks no element present, but the {len(data)}-byte data "
                f"section is not the data codecs' encoding of zero elements "
                f"({type(e).__name__}: {e})"
            )
        return OptionalCodecError(
            f"{where}: cannot decode {n} present elements from the {len(data)}-byte data "
            f"section ({type(e).__name__}: {e})"
        )

    def _mask_error(self, e: Exception, mask: Buffer) -> OptionalCodecError:
        return OptionalCodecError(
            f"{self.name} codec, {describe_chunk(current_chunk_index())}: cannot decode "
            f"the {len(mask)}-byte mask section ({type(e).__name__}: {e})"
        )

    @cached_property
    def _data_compressors(self) -> tuple[Codec, ...]:
        return tuple(c for c in self.data_codecs if isinstance(c, BytesBytesCodec))

    @cached_property
    def _data_values_transform(self) -> ChunkTransform:
        """The data chain without its bytes->bytes codecs."""
        return ChunkTransform(
            codecs=tuple(c for c in self.data_codecs if not isinstance(c, BytesBytesCodec))
        )

    @cached_property
    def _variable_length(self) -> bool:
        """Whether the data chain serializes with numcodecs' variable-length format."""
        return any(isinstance(c, VLenUTF8Codec | VLenBytesCodec) for c in self.data_codecs)

    def _check_count(self, raw: Buffer, n: int) -> None:
        """A variable-length section starts with its element count (u32 LE): refuse
        any count but the ``n`` present elements before the codec allocates for it."""
        head = raw[:4].to_bytes()
        count = struct.unpack("<I", head)[0] if len(head) == 4 else None
        if count != n:
            raise OptionalCodecError(
                f"{self.name} codec, {describe_chunk(current_chunk_index())}: the "
                f"variable-length data section holds {count} elements, but the mask marks "
                f"{n} present"
            )

    def _decode_values(self, data_bytes: Buffer, spec: ArraySpec, n: int) -> NDBuffer | None:
        if not self._variable_length:
            return self._data_transform.decode_chunk(data_bytes, spec)
        raw = data_bytes
        for codec in reversed(self._data_compressors):
            raw = codec._decode_sync(raw, spec)  # type: ignore[union-attr]
        self._check_count(raw, n)
        return self._data_values_transform.decode_chunk(raw, spec)

    @cached_property
    def _mask_codecs_of_nothing(self) -> tuple[Codec, ...]:
        return reading_nothing(self.mask_codecs)

    @cached_property
    def _data_codecs_of_nothing(self) -> tuple[Codec, ...]:
        return reading_nothing(self.data_codecs)

    def _decode_nothing(
        self, codecs: tuple[Codec, ...], section: Buffer, spec: ArraySpec
    ) -> NDBuffer | None:
        """A section of a chain (:func:`reading_nothing`) applied to zero elements
        (``spec``): no bytes, as zarrs writes it, or the chain's encoding of an empty
        array, as spec 003 does. A section that holds any element fails in its
        codecs (or in the caller's check of what they decoded)."""
        if not len(section):
            return spec.prototype.nd_buffer.from_numpy_array(
                np.empty(spec.shape, spec.dtype.to_native_dtype())
            )
        if not any(isinstance(c, VLenUTF8Codec | VLenBytesCodec) for c in codecs):
            return ChunkTransform(codecs=codecs).decode_chunk(section, spec)
        raw = section
        for codec in reversed([c for c in codecs if isinstance(c, BytesBytesCodec)]):
            raw = codec._decode_sync(raw, spec)  # type: ignore[attr-defined]
        self._check_count(raw, 0)
        array_codecs = tuple(c for c in codecs if not isinstance(c, BytesBytesCodec))
        return ChunkTransform(codecs=array_codecs).decode_chunk(raw, spec)

    async def _decode_nothing_async(
        self, codecs: tuple[Codec, ...], section: Buffer, spec: ArraySpec
    ) -> NDBuffer | None:
        """:meth:`_decode_nothing` for chains with codecs that decode asynchronously only."""
        if not len(section) or all(codec_supports_sync(c) for c in codecs):
            return self._decode_nothing(codecs, section, spec)
        if any(isinstance(c, VLenUTF8Codec | VLenBytesCodec) for c in codecs) and not any(
            isinstance(c, BytesBytesCodec) for c in codecs
        ):
            self._check_count(section, 0)
        (values,) = await get_pipeline_class().from_codecs(codecs).decode([(section, spec)])
        return values

    def _decode_parts(
        self, chunk_bytes: Buffer, chunk_spec: ArraySpec
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any] | None, int]:
        """The chunk's validity (bool, chunk shape), its present values (1-D, None if
        there are none) and their count, each section checked against the others."""
        mask_bytes, data_bytes = self._sections(chunk_bytes)
        mask_spec = self.mask_spec(chunk_spec)
        try:
            mask_nd = (
                self._mask_transform.decode_chunk(mask_bytes, mask_spec)
                if _has_elements(chunk_spec)  # else a nested level under a chunk with none
                else self._decode_nothing(self._mask_codecs_of_nothing, mask_bytes, mask_spec)
            )
        except OptionalCodecError:
            raise
        except Exception as e:  # any error of the nested chain is this chunk's error
            raise self._mask_error(e, mask_bytes) from e
        mask = self._check_mask(mask_nd, chunk_spec)
        n = int(np.count_nonzero(mask))
        data_spec = self.data_spec(chunk_spec, n)
        try:
            values = (
                self._decode_values(data_bytes, data_spec, n) if n
                else self._decode_nothing(self._data_codecs_of_nothing, data_bytes, data_spec)
            )
        except OptionalCodecError:
            raise
        except Exception as e:  # any error of the nested chain is this chunk's error
            raise self._data_error(e, n, data_bytes) from e
        return mask, self._present_values(values, n, chunk_spec), n

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._assemble(*self._decode_parts(chunk_bytes, chunk_spec), chunk_spec)

    def decode_split(
        self, chunk_bytes: Buffer, chunk_spec: ArraySpec
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """One chunk as two arrays of its shape: the values and their validity.

        For readers that want values and mask apart (``numpy.ma``, see
        :mod:`zarrext.pipeline.masked_read`): the interleaved ``(value, valid)`` chunk is
        never built. Missing elements hold zero. When every element is present
        the values may be a view of the data codecs' output, which a pipeline
        may reuse: copy them before this thread decodes again.
        """
        if not self._sync_capable:
            raise TypeError(f"{self.name} codec: a nested codec has no synchronous decode")
        valid, present, n = self._decode_parts(chunk_bytes, chunk_spec)
        if present is not None and n == valid.size:
            return present.reshape(valid.shape), valid
        inner: np.dtype[Any] = self._inner(chunk_spec.dtype).to_native_dtype()
        values = np.zeros(valid.shape, dtype=inner)
        if present is not None:
            values[valid] = present
        return values, valid

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        if self._sync_capable:
            return self._decode_sync(chunk_bytes, chunk_spec)
        mask_bytes, data_bytes = self._sections(chunk_bytes)
        mask_spec = self.mask_spec(chunk_spec)
        pipeline = get_pipeline_class()
        try:
            if _has_elements(chunk_spec):
                (mask_nd,) = await pipeline.from_codecs(self.mask_codecs).decode(
                    [(mask_bytes, mask_spec)]
                )
            else:  # a nested level under a chunk with no element present
                mask_nd = await self._decode_nothing_async(
                    self._mask_codecs_of_nothing, mask_bytes, mask_spec
                )
        except OptionalCodecError:
            raise
        except Exception as e:  # any error of the nested chain is this chunk's error
            raise self._mask_error(e, mask_bytes) from e
        mask = self._check_mask(mask_nd, chunk_spec)
        n = int(np.count_nonzero(mask))
        data_spec = self.data_spec(chunk_spec, n)
        try:
            if not n:
                values = await self._decode_nothing_async(
                    self._data_codecs_of_nothing, data_bytes, data_spec
                )
            else:
                if self._variable_length and not self._data_compressors:
                    self._check_count(data_bytes, n)
                (values,) = await pipeline.from_codecs(self.data_codecs).decode(
                    [(data_bytes, data_spec)]
                )
        except OptionalCodecError:
            raise
        except Exception as e:  # any error of the nested chain is this chunk's error
            raise self._data_error(e, n, data_bytes) from e
        return self._assemble(mask, self._present_values(values, n, chunk_spec), n, chunk_spec)
