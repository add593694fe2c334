"""Decoding a codec chain applied to zero elements (``optional``'s sections of nothing).

Spec 003 applies the data codecs to the present values only, so a chunk with none
present holds their encoding of an empty array (and a nested level's mask codecs
are applied to zero elements). numcodecs (0.17), which decodes zarr's ``zstd`` and
``blosc``, refuses their own encoding of zero bytes: a zstd frame whose content
size is 0, a blosc header of 0 bytes. :func:`reading_nothing` gives a chain whose
zstd and blosc codecs decode through imagecodecs instead, into a bounded buffer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.codecs.numcodecs import Blosc as NumcodecsBlosc
from zarr.codecs.numcodecs import Zstd as NumcodecsZstd

from zarrext.codecs.blosc_frames import check_blosc_frame
from zarrext.codecs.walk import map_nested

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer
    from zarr.core.common import JSON

__all__ = ["NOTHING_BOUND", "reading_nothing"]

# Most bytes a bytes->bytes codec of a chain applied to zero elements decodes to:
# a few headers (a variable-length count; a nested level's lengths and its own
# encodings of nothing, some 50 bytes a level).
NOTHING_BOUND = 4096

_ZSTD = (ZstdCodec, NumcodecsZstd)
_BLOSC = (BloscCodec, NumcodecsBlosc)


@dataclass(frozen=True)
class _DecodesNothing(BytesBytesCodec):
    """A zstd or blosc codec (zarr's or numcodecs') that decodes through imagecodecs
    into at most :data:`NOTHING_BOUND` bytes, for chains applied to zero elements.

    A section that decodes to more than the bound holds elements: it is refused,
    not allocated.
    """

    codec: BytesBytesCodec
    is_fixed_size = False

    def to_dict(self) -> dict[str, JSON]:
        return self.codec.to_dict()

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return self.codec.compute_encoded_size(input_byte_length, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return self.codec._encode_sync(chunk_bytes, chunk_spec)  # type: ignore[attr-defined]

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return await self.codec._encode_single(chunk_bytes, chunk_spec)

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        import imagecodecs  # 60 ms to import: only for chunks with nothing present

        source = chunk_bytes.as_numpy_array()
        if isinstance(self.codec, _ZSTD):
            decode = imagecodecs.zstd_decode
        else:
            check_blosc_frame(source)  # c-blosc trusts the header's frame size
            decode = imagecodecs.blosc_decode
        out = decode(source, out=bytearray(NOTHING_BOUND))
        return chunk_spec.prototype.buffer.from_bytes(bytes(out))

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)


def reading_nothing(codecs: Iterable[Codec]) -> tuple[Codec, ...]:
    """``codecs`` with each zstd and blosc codec, also inside ``conditional``, as
    :class:`_DecodesNothing`: for decoding sections of zero elements only."""
    return tuple(
        _bytes_codec_reading_nothing(c) if isinstance(c, BytesBytesCodec) else c for c in codecs
    )


def _bytes_codec_reading_nothing(codec: BytesBytesCodec) -> BytesBytesCodec:
    from zarrext.codecs.conditional import ConditionalCodec  # its decisions: only here

    if isinstance(codec, _ZSTD + _BLOSC):
        return _DecodesNothing(codec)
    if isinstance(codec, ConditionalCodec):
        return map_nested(codec, _bytes_codec_reading_nothing)
    return codec
