"""Runtime settings (decisions, padding functions, shard layouts, an optional codec's
value type) are dataclass fields with ``compare=False``: never in metadata, not part
of equality or hashing, and kept by ``dataclasses.replace``, ``evolve_from_array_spec``
and pickling, so no codec needs a hand-written copy."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from zarr.abc.codec import Codec
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import Int32

import zarrext.codecs
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.decisions import NoDecisionWarning, Undecided, resolve_decision
from zarrext.codecs.optional import OptionalCodec
from zarrext.codecs.packbits import PackBitsCodec
from zarrext.codecs.pad import PadCodec, SaidOnce
from zarrext.dtypes.optional import OptionalDType
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline
from zarrext.sharding.codec import RuntimeShardingCodec
from zarrext.sharding.layout import LayoutShardingCodec


def _padding(encoded: Any, chunk_index: Any, chunk_shape: Any) -> bytes:
    return b"\x01" * 4


def _said() -> SaidOnce:
    said = SaidOnce()
    said.first()
    return said


# (codec with the setting, the same codec without it, the field, the setting's value
# as repr: decisions compare by identity)
CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any], str, Any]] = {
    "conditional.decision": (
        lambda: ConditionalCodec([ZstdCodec()], decision="always_apply"),
        lambda: ConditionalCodec([ZstdCodec()]),
        "decision",
        repr(resolve_decision("always_apply", None)),
    ),
    # what zarrext binds when an array has no decision: stored raw, with a warning
    "conditional.undecided": (
        lambda: ConditionalCodec([ZstdCodec()], decision=Undecided("file:///a.zarr")),
        lambda: ConditionalCodec([ZstdCodec()]),
        "decision",
        repr(Undecided("file:///a.zarr")),
    ),
    "pad.padding_func": (
        lambda: PadCodec(location="start", nbytes=4, padding=_padding),
        lambda: PadCodec(location="start", nbytes=4),
        "padding_func",
        repr(_padding),
    ),
    # whether the writers of an opened array were told its padding misfits: shared by copies
    "pad.mismatch_said": (
        lambda: PadCodec(location="start", nbytes=4, mismatch_said=_said()),
        lambda: PadCodec(location="start", nbytes=4),
        "mismatch_said",
        "SaidOnce(said=True)",
    ),
    "sharding.shard_layout": (
        lambda: LayoutShardingCodec(
            shard_layout="append", chunk_shape=(4,), codecs=[BytesCodec()]
        ),
        lambda: ShardingCodec(chunk_shape=(4,), codecs=[BytesCodec()]),
        "shard_layout",
        repr("append"),
    ),
    "optional.inner": (
        lambda: OptionalCodec(inner="int32"),
        lambda: OptionalCodec(),
        "inner",
        repr(Int32()),
    ),
}

# Every field that is not compared, per class: the runtime settings above, the
# pipeline's cached transform (and what its chain stores, derived from the codecs and
# the plan, which is compared), and packbits' choice between two spellings of the same
# metadata (what it means is compared; how to_dict spells it is not).
NOT_COMPARED = {
    ConditionalCodec: {"decision"},
    PackBitsCodec: {"spelling"},
    PadCodec: {"padding_func", "mismatch_said"},
    LayoutShardingCodec: {"shard_layout"},
    OptionalCodec: {"inner"},
    ZarrextCodecPipeline: {"transform", "encodes_into_arena", "storable"},
}


def _spec(dtype: Any = None) -> ArraySpec:
    return ArraySpec((16,), dtype or Int32(), 0, ArrayConfig.from_dict({}),
                     default_buffer_prototype())


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
def test_a_runtime_setting_is_not_metadata_and_survives_copies(case: str) -> None:
    make, make_plain, name, value = CASES[case]
    codec, plain = make(), make_plain()
    setting = getattr(codec, name)
    assert repr(setting) == value
    assert repr(getattr(plain, name, None)) != value
    assert codec == plain
    assert hash(codec) == hash(plain)
    assert codec.to_dict() == plain.to_dict()
    assert getattr(dataclasses.replace(codec), name) is setting
    spec = _spec(OptionalDType(Int32()) if isinstance(codec, OptionalCodec) else None)
    assert getattr(codec.evolve_from_array_spec(spec), name) is setting
    if name != "padding_func":  # a function pickles by reference: _padding is module-level
        assert repr(getattr(pickle.loads(pickle.dumps(codec)), name)) == value
    else:
        assert getattr(pickle.loads(pickle.dumps(codec)), name) is setting


def test_every_field_left_out_of_equality_is_a_known_runtime_setting() -> None:
    """A new setting must be declared ``field(compare=False)`` and listed here (and in
    CASES), not stored as a plain attribute beside the dataclass fields."""
    classes = {getattr(zarrext.codecs, n) for n in zarrext.codecs.__all__}
    classes = {c for c in classes if inspect.isclass(c) and issubclass(c, Codec)}
    classes |= {LayoutShardingCodec, ZarrextCodecPipeline}
    for cls in classes:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        not_compared = {n for n, f in fields.items() if not f.compare}
        if cls is LayoutShardingCodec:  # ShardingCodec's own fields are compared
            not_compared &= {"shard_layout"}
        assert not_compared == NOT_COMPARED.get(cls, set()), cls.__name__
    for cls, names in NOT_COMPARED.items():
        for name in names:
            field = {f.name: f for f in dataclasses.fields(cls)}[name]
            assert field.compare is False, (cls.__name__, name)


def test_with_padding_and_with_decision_are_replace() -> None:
    pad = PadCodec(location="end", nbytes=4, padding=b"\x02" * 4)
    assert pad.with_padding(_padding).padding_func is _padding
    restored = pad.with_padding(_padding).with_padding(None)
    assert restored == pad
    assert restored.padding_for(default_buffer_prototype().buffer.from_bytes(b"x"),
                                _spec()) == b"\x02" * 4
    plain = ConditionalCodec([ZstdCodec()])
    conditional = plain.with_decision("always_apply")
    assert repr(conditional.decision) == repr(resolve_decision("always_apply", None))
    assert conditional == plain
    assert repr(plain.decision) != repr(conditional.decision)


def _class_source(cls: type) -> str:
    """A class's source, found in the module its methods were defined in: a class whose
    ``__module__`` names the package that re-exports it
    (``zarrext.pipeline.ZarrextCodecPipeline``) is not where ``inspect`` looks."""
    import ast
    import sys

    method = next(v for v in vars(cls).values() if inspect.isfunction(v))
    module = ast.parse(inspect.getsource(sys.modules[method.__module__]))
    return next(ast.unparse(node) for node in module.body
                if isinstance(node, ast.ClassDef) and node.name == cls.__name__)


def test_no_codec_keeps_a_setting_in_a_plain_attribute() -> None:
    """``object.__setattr__(self, name, ...)`` in a codec sets a declared field, or a
    per-object cache (``_zarrext_*``: rebuilt on demand, so a copy may drop it)."""
    import ast
    import textwrap

    classes = {getattr(zarrext.codecs, n) for n in zarrext.codecs.__all__}
    classes = {c for c in classes if inspect.isclass(c) and issubclass(c, Codec)}
    classes |= {LayoutShardingCodec, ZarrextCodecPipeline, RuntimeShardingCodec}
    seen = set()
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}
        tree = ast.parse(textwrap.dedent(_class_source(cls)))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "object.__setattr__"
                and isinstance(node.args[1], ast.Constant)
            ):
                attribute = node.args[1].value
                seen.add((cls.__name__, attribute))
                assert attribute in names or attribute.startswith("_zarrext_"), (
                    cls.__name__, attribute
                )
    assert ("LayoutShardingCodec", "shard_layout") in seen  # the check sees the calls
    assert ("RuntimeShardingCodec", "_zarrext_per_shard_spec") in seen


def test_a_pickled_no_decision_marker_still_names_its_array_and_stores_raw() -> None:
    """Dask ships a writer's codecs to its workers by pickling them."""
    codec = pickle.loads(
        pickle.dumps(ConditionalCodec([ZstdCodec()], decision=Undecided("file:///a.zarr")))
    )
    raw = default_buffer_prototype().buffer.from_bytes(bytes(64))
    with pytest.warns(NoDecisionWarning, match="file:///a.zarr"):
        encoded = codec._encode_sync(raw, _spec())
    assert encoded.to_bytes() == b"\x00" + bytes(64)  # header: mask 0, then the raw bytes
