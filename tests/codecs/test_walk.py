"""The one walker over nested codecs (:mod:`zarrext.codecs.walk`)."""

from __future__ import annotations


def test_walk_codecs_visits_every_nested_codec_depth_first() -> None:
    """One walker over nested codecs (sharding, conditional, optional), at any depth."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

    from zarrext.codecs.conditional import ConditionalCodec
    from zarrext.codecs.optional import OptionalCodec
    from zarrext.codecs.packbits import PackBitsCodec
    from zarrext.codecs.walk import nested_codecs, walk_codecs

    conditional = ConditionalCodec([ZstdCodec()])
    optional = OptionalCodec(mask_codecs=[PackBitsCodec()],
                             data_codecs=[BytesCodec(), conditional])
    sharding = ShardingCodec(chunk_shape=(4,), codecs=[BytesCodec(), conditional],
                             index_codecs=[BytesCodec(), Crc32cCodec()])
    assert nested_codecs(ZstdCodec()) == []
    assert nested_codecs(optional) == [PackBitsCodec(), BytesCodec(), conditional]
    names = [type(c).__name__ for c in walk_codecs([sharding, optional])]
    assert names == ["ShardingCodec", "BytesCodec", "ConditionalCodec", "ZstdCodec",
                     "OptionalCodec", "PackBitsCodec", "BytesCodec", "ConditionalCodec",
                     "ZstdCodec"]


def test_walk_codecs_follows_only_the_chains_asked_for() -> None:
    """``chains`` limits the walk: through ``codecs`` alone, ``optional``'s chains are
    not entered, a ``conditional`` inside a shard is."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

    from zarrext.codecs.conditional import ConditionalCodec
    from zarrext.codecs.optional import OptionalCodec
    from zarrext.codecs.walk import walk_codecs

    optional = OptionalCodec(data_codecs=[BytesCodec(), Crc32cCodec()])
    sharding = ShardingCodec(chunk_shape=(4,), codecs=[BytesCodec(),
                                                        ConditionalCodec([ZstdCodec()])])
    names = [type(c).__name__ for c in walk_codecs([optional, sharding], chains=("codecs",))]
    assert names == ["OptionalCodec", "ShardingCodec", "BytesCodec", "ConditionalCodec",
                     "ZstdCodec"]


def test_map_nested_rebuilds_only_the_chains_asked_for() -> None:
    """``map_nested`` applies the function to the codecs held directly, in the chains
    asked for, and keeps the codec's class and other settings; a codec holding none
    comes back as it is."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

    from zarrext.codecs.conditional import ConditionalCodec
    from zarrext.codecs.optional import OptionalCodec
    from zarrext.codecs.packbits import PackBitsCodec
    from zarrext.codecs.walk import map_nested

    def crc_for_zstd(codec: object) -> object:
        return Crc32cCodec() if isinstance(codec, ZstdCodec) else codec

    zstd = ZstdCodec()
    assert map_nested(zstd, crc_for_zstd) is zstd
    conditional = ConditionalCodec([ZstdCodec(), ZstdCodec(level=3)], header_bits=16,
                                   name="optional")
    mapped = map_nested(conditional, crc_for_zstd)
    assert type(mapped) is ConditionalCodec
    assert mapped.codecs == (Crc32cCodec(), Crc32cCodec())
    assert (mapped.header_bits, mapped.name) == (16, "optional")
    optional = OptionalCodec(mask_codecs=[PackBitsCodec(), ZstdCodec()],
                             data_codecs=[BytesCodec(), ZstdCodec()], name="zarrs.optional")
    values_only = map_nested(optional, crc_for_zstd, chains=("data_codecs",))
    assert values_only.mask_codecs == (PackBitsCodec(), ZstdCodec())
    assert values_only.data_codecs == (BytesCodec(), Crc32cCodec())
    assert values_only.name == "zarrs.optional"
    both = map_nested(optional, crc_for_zstd)
    assert both.mask_codecs == (PackBitsCodec(), Crc32cCodec())


def test_map_nested_gives_back_a_codec_whose_nested_codecs_it_leaves() -> None:
    """A function that gives back every nested codec as it is leaves the holder as it
    is (its caches with it); one changed codec rebuilds only its own chain."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

    from zarrext.codecs.optional import OptionalCodec
    from zarrext.codecs.packbits import PackBitsCodec
    from zarrext.codecs.walk import map_nested

    mask = (PackBitsCodec(), ZstdCodec())
    optional = OptionalCodec(mask_codecs=list(mask), data_codecs=[BytesCodec(), Crc32cCodec()])
    assert map_nested(optional, lambda c: c) is optional
    swapped = map_nested(optional, lambda c: ZstdCodec() if isinstance(c, Crc32cCodec) else c)
    assert swapped is not optional
    assert swapped.data_codecs == (BytesCodec(), ZstdCodec())
    assert all(new is old for new, old in zip(swapped.mask_codecs, optional.mask_codecs,
                                               strict=True))
