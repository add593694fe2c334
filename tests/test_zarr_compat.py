"""zarrext._zarr_compat: every private zarr name is checked, and fails loudly when changed.

Two kinds of test: each requirement fails with ZarrCompatibilityError naming it when
the name is missing or changed (on stand-ins, since the installed zarr is fine), and
each zarr function zarrext wraps or overrides is still called by zarr (if zarr stopped
calling one, zarrext would silently lose its behaviour, so these tests would fail).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec

import zarrext
import zarrext.pipeline.codec_pipeline
from zarrext import _zarr_compat as compat
from zarrext._zarr_compat import REQUIREMENTS, Requirement, ZarrCompatibilityError
from zarrext.sharding.codec import RuntimeShardingCodec
from zarrext.sharding.layout import LayoutShardingCodec

IDS = [f"{req.where}.{req.name}" for _, req in REQUIREMENTS]


def test_installed_zarr_meets_every_requirement() -> None:
    found = compat.verify()
    assert set(found) == {req.name for _, req in REQUIREMENTS}
    assert compat.EMPTY_SHARD_INDEX_ENTRY == 2**64 - 1


@pytest.mark.parametrize(("owner", "requirement"), REQUIREMENTS, ids=IDS)
def test_a_missing_name_fails_loudly(owner: object, requirement: Requirement) -> None:
    stand_in = types.SimpleNamespace()
    with pytest.raises(ZarrCompatibilityError, match=rf"{requirement.name}\b.*does not exist"):
        requirement.check(stand_in)
    assert isinstance(ZarrCompatibilityError("x"), ImportError)


def _changed(requirement: Requirement, owner: object) -> object:
    """A stand-in owner whose attribute exists but differs from what zarrext expects."""
    name = requirement.name
    if requirement.parameters is not None:
        def changed(self: object, renamed: object) -> None: ...

        if isinstance(owner, type):
            return type("StandIn", (), {name: changed})
        return types.SimpleNamespace(**{name: lambda renamed: None})
    if requirement.fields is not None:
        @dataclasses.dataclass
        class WithoutFields:
            unrelated: int = 0

        return types.SimpleNamespace(**{name: WithoutFields})
    if requirement.annotated is not None:
        return type("StandIn", (), {"__annotations__": {name: "str"}})
    assert requirement.kind is not None
    return type("StandIn", (), {name: "a plain string"})


@pytest.mark.parametrize(("owner", "requirement"), REQUIREMENTS, ids=IDS)
def test_a_changed_name_fails_loudly(owner: object, requirement: Requirement) -> None:
    with pytest.raises(ZarrCompatibilityError, match=requirement.name) as raised:
        requirement.check(_changed(requirement, owner))
    message = str(raised.value)
    assert zarr.__version__ in message
    assert "takes" in message or "is not" in message or "do not exist" in message


def test_fields_must_be_a_dataclass() -> None:
    requirement = Requirement("zarr", "Array", fields=("_async_array",))
    with pytest.raises(ZarrCompatibilityError, match="is not a dataclass"):
        requirement.check(types.SimpleNamespace(Array=object))


def test_importing_zarrext_with_a_missing_internal_fails_naming_it() -> None:
    code = (
        "import zarr.codecs.sharding as s\n"
        "del s._ShardIndex\n"
        "import zarrext.codecs.conditional\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("zarrext._zarr_compat.ZarrCompatibilityError")
    assert "zarr.codecs.sharding._ShardIndex" in last
    assert "does not exist" in last


def test_importing_zarrext_with_a_changed_signature_fails_naming_it() -> None:
    code = (
        "import zarr.core.array as a\n"
        "async def _set_selection(store_path, metadata, value): ...\n"
        "a._set_selection = _set_selection\n"
        "import zarrext.integration.optional\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert "zarr.core.array._set_selection(" in out.stderr
    assert "takes (store_path, metadata, value)" in out.stderr


# -- wrapped and overridden zarr functions are still called --------------------------------


def _calls(name: str) -> int:
    return compat.WRAPPER_CALLS[name]


def test_masked_writes_go_through_the_set_selection_wrapper(tmp_path: Path) -> None:
    z = zarr.create_array(tmp_path / "a", shape=(4,), dtype=zarrext.OptionalDType("int16"))
    before = _calls("_set_selection")
    z[:] = np.ma.MaskedArray([1, 2, 3, 4], mask=[False, True, False, True])
    assert _calls("_set_selection") > before
    # what the wrapper is for: missing stays missing (numpy's cast would mark 2 and 4
    # present, since their values are not 0)
    assert zarrext.to_masked(z[:]).mask.tolist() == [False, True, False, True]


def test_new_optional_arrays_go_through_the_serializer_and_init_wrappers(
    tmp_path: Path,
) -> None:
    before = (_calls("default_serializer_v3"), _calls("init_array"))
    z = zarr.create_array(tmp_path / "a", shape=(4,), dtype=zarrext.OptionalDType("int16"))
    assert _calls("default_serializer_v3") > before[0]
    assert _calls("init_array") > before[1]
    assert isinstance(z.metadata.codecs[0], zarrext.OptionalCodec)
    assert len(z.metadata.codecs) == 1  # the registry's advice: optional alone


def test_wrappers_leave_other_arrays_alone(tmp_path: Path) -> None:
    z = zarr.create_array(tmp_path / "a", shape=(4,), dtype="float32")
    z[:] = [1.0, np.nan, 3.0, None]  # NaN/None mean "missing" only for optional arrays
    assert np.isnan(z[:]).tolist() == [False, True, False, True]
    assert [c.to_dict()["name"] for c in z.metadata.codecs] == ["bytes", "zstd"]


def _spy(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[Any]:
    calls: list[Any] = []
    original = getattr(cls, name)

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, spy)
    return calls


def _sharded(path: Path, layout: str | None) -> zarr.Array:
    return zarrext.create_array(
        str(path), shape=(16, 16), chunks=(8, 8), dtype="i4", fill_value=-1,
        compressors=None,
        serializer=ShardingCodec(chunk_shape=(4, 4), codecs=[BytesCodec()]),
        shard_layout=layout,
    )


def test_fixed_slot_writes_go_through_encode_partial_single(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy(monkeypatch, LayoutShardingCodec, "_encode_partial_single")
    z = _sharded(tmp_path / "a", "fixed-slot")
    z[0:4, 0:4] = 7
    assert calls, "zarr no longer calls ShardingCodec._encode_partial_single"
    assert zarr.open_array(tmp_path / "a")[0:4, 0:4].tolist() == [[7] * 4] * 4


def test_shard_reads_go_through_the_inner_pipeline_and_partial_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    z = _sharded(tmp_path / "a", None)
    z[:] = np.arange(256).reshape(16, 16)
    # zarr's own shard path (taken where zarrext's per-shard thread jobs are not:
    # async-only inner codecs, codecs around the sharding codec)
    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "reads_local_shards",
                        lambda pipeline, batch: False)
    inner = _spy(monkeypatch, RuntimeShardingCodec, "_get_inner_pipeline")
    partial = _spy(monkeypatch, RuntimeShardingCodec, "_decode_partial_single")
    got = zarrext.open_array(str(tmp_path / "a"), mode="r")[0:4, 0:4]
    assert got.tolist() == np.arange(256).reshape(16, 16)[0:4, 0:4].tolist()
    assert partial, "zarr no longer calls ShardingCodec._decode_partial_single"
    assert inner, "zarr no longer calls ShardingCodec._get_inner_pipeline"


def test_unwrapped_store_reads_through_wrappers_and_fails_loudly_without_one() -> None:
    from zarr.storage import LoggingStore, MemoryStore

    from zarrext._zarr_compat import ZarrCompatibilityError, unwrapped_store

    inner = MemoryStore()
    assert unwrapped_store(LoggingStore(LoggingStore(inner))) is inner
    assert unwrapped_store(inner) is inner
    wrapper = LoggingStore(inner)
    del wrapper._store  # as if zarr renamed it
    with pytest.raises(ZarrCompatibilityError, match=r"WrapperStore\._store"):
        unwrapped_store(wrapper)
