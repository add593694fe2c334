"""zarrext behind the ``cmd:`` protocol, with one defect planted (or none)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from conformance.adapters import EXIT_CODES, Refused, Unsupported, ZarrextAdapter
from conformance.values import load_file, save_file

STATUS = {cause: status for status, cause in EXIT_CODES.items()}
_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _header_bit_order() -> None:
    from zarrext.codecs.conditional import ConditionalCodec, ConditionalCodecError

    def read_mask(self: Any, chunk_bytes: Any) -> int:
        n = self.header_nbytes
        if len(chunk_bytes) < n:
            raise ConditionalCodecError(f"{len(chunk_bytes)} bytes, shorter than the header")
        header = chunk_bytes.as_numpy_array()[:n].tobytes()
        return int.from_bytes(header.translate(_REVERSED), "little")

    def with_header(self: Any, mask: int, payload: Any, chunk_spec: Any) -> Any:
        header = mask.to_bytes(self.header_nbytes, "little").translate(_REVERSED)
        out = np.concatenate((np.frombuffer(header, np.uint8), payload.as_numpy_array()))
        return chunk_spec.prototype.buffer.from_array_like(out)

    ConditionalCodec.read_mask = read_mask  # type: ignore[method-assign]
    ConditionalCodec._with_header = with_header  # type: ignore[method-assign]


def _shard_index_big_endian() -> None:
    from zarr.codecs import sharding

    decode, encode = (sharding.ShardingCodec._decode_shard_index_sync,
                      sharding.ShardingCodec._encode_shard_index_sync)

    def decode_swapped(self: Any, index_bytes: Any, chunks_per_shard: Any) -> Any:
        index = decode(self, index_bytes, chunks_per_shard)
        return sharding._ShardIndex(chunks_per_shard, index.offsets_and_lengths.byteswap())

    def encode_swapped(self: Any, index: Any) -> Any:
        swapped = sharding._ShardIndex(index.chunks_per_shard,
                                       index.offsets_and_lengths.byteswap())
        return encode(self, swapped)

    sharding.ShardingCodec._decode_shard_index_sync = decode_swapped  # type: ignore[method-assign]
    sharding.ShardingCodec._encode_shard_index_sync = encode_swapped  # type: ignore[method-assign]


def _pad_off_by_one() -> None:
    from zarrext.codecs.pad import PadCodec

    def decode(self: Any, chunk_bytes: Any, chunk_spec: Any) -> Any:
        n = self.nbytes + 1
        return chunk_bytes[n:] if self.location == "start" else chunk_bytes[:len(chunk_bytes) - n]

    padding_for = PadCodec.padding_for

    def one_more(self: Any, encoded: Any, chunk_spec: Any) -> bytes:
        return padding_for(self, encoded, chunk_spec) + b"\0"

    PadCodec._decode_sync = decode  # type: ignore[method-assign]
    PadCodec.padding_for = one_more  # type: ignore[method-assign]


def _optional_mask_inverted() -> None:
    from zarrext.codecs.optional import OptionalCodec

    check, split = OptionalCodec._check_mask, OptionalCodec._split

    def check_inverted(self: Any, mask_nd: Any, chunk_spec: Any) -> Any:
        return ~check(self, mask_nd, chunk_spec)

    def split_inverted(self: Any, chunk_array: Any, chunk_spec: Any) -> Any:
        mask, present, spec = split(self, chunk_array, chunk_spec)
        inverted = chunk_spec.prototype.nd_buffer.from_numpy_array(~mask.as_numpy_array())
        return inverted, present, spec

    OptionalCodec._check_mask = check_inverted  # type: ignore[method-assign,assignment]
    OptionalCodec._split = split_inverted  # type: ignore[method-assign]


def _rounding_half_away() -> None:
    from zarr.codecs.cast_value import CastValue

    init = CastValue.__init__

    def half_away(self: Any, *args: Any, rounding: Any = "nearest-even", **kw: Any) -> None:
        init(self, *args, rounding="nearest-away" if rounding == "nearest-even" else rounding,
             **kw)

    CastValue.__init__ = half_away  # type: ignore[method-assign]


PLANT: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "header-bit-order": _header_bit_order,
    "shard-index-big-endian": _shard_index_big_endian,
    "pad-off-by-one": _pad_off_by_one,
    "optional-mask-inverted": _optional_mask_inverted,
    "rounding-half-away": _rounding_half_away,
}


def run(name: str, args: list[str]) -> int:
    """One protocol call against zarrext with mutant ``name``'s defect."""
    PLANT[name]()  # KeyError for an unknown mutant: a crash, as it should be
    impl = ZarrextAdapter()
    try:
        if args[0] == "read":
            save_file(args[2], impl.read(Path(args[1]), {}))
        else:
            case = {"writer": json.loads(args[4])}
            impl.write(Path(args[1]), case, load_file(args[2]),
                       json.loads(args[3]))
    except Unsupported as error:
        print(error, file=sys.stderr)
        return 3
    except Refused as error:
        print(error, file=sys.stderr)
        return STATUS[error.cause]
    return 0
