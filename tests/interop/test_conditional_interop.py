"""Interop: arrays written with the conditional codec read with stock zarr-python.

Fresh processes prove that installing zarrext is enough (entry points), without any
``import zarrext`` in the reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import crc32c
import numcodecs
import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

import zarrext
from zarrext import ConditionalCodec, ShuffleCodec

READER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import zarr
    assert "zarrext" not in sys.modules
    z = zarr.open_array(sys.argv[1], mode="r")
    data = z[...]
    print(json.dumps({
        "codecs": [type(c).__name__ for c in z.metadata.codecs],
        "dtype": str(data.dtype),
        "shape": list(data.shape),
        "bits": data.view(np.uint8).tobytes().hex(),
    }))
    """
)


def read_in_fresh_process(path: Path) -> tuple[np.ndarray, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", READER, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    data = np.frombuffer(bytes.fromhex(out["bits"]), dtype=out["dtype"]).reshape(out["shape"])
    return data, out["codecs"]


def mixed_data(shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(11)
    data = rng.integers(0, 2**32, size=shape, dtype=np.uint32).view(np.float32)
    data[: shape[0] // 2] = np.linspace(0, 1, (shape[0] // 2) * shape[1], dtype=np.float32).reshape(
        -1, shape[1]
    )
    return data


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def test_fresh_process_reads_conditional_with_shuffle(tmp_path: Path) -> None:
    data = mixed_data((32, 16))
    z = zarrext.create_array(
        tmp_path,
        shape=data.shape,
        chunks=(8, 16),
        dtype="<f4",
        compressors=[
            ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()]),
            Crc32cCodec(),
        ],
        decision="compress_if_smaller",
    )
    z[:] = data
    masks = {p.parent.name: p.read_bytes()[0] for p in (tmp_path / "c").rglob("*") if p.is_file()}
    assert masks == {
        "0": 0b11,
        "1": 0b11,
        "2": 0b00,
        "3": 0b00,
    }  # smooth rows compressed, random raw
    back, codecs = read_in_fresh_process(tmp_path)
    assert codecs == ["BytesCodec", "ConditionalCodec", "Crc32cCodec"]
    assert_same_bits(back, data)


def test_fresh_process_reads_optional_name(tmp_path: Path) -> None:
    data = np.arange(64, dtype="<i4").reshape(8, 8)
    z = zarrext.create_array(
        tmp_path,
        shape=data.shape,
        chunks=(4, 4),
        dtype="<i4",
        compressors=[
            ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()], name="optional")
        ],
        decision="always_apply",
    )
    z[:] = data
    assert json.loads((tmp_path / "zarr.json").read_text())["codecs"][1]["name"] == "optional"
    back, codecs = read_in_fresh_process(tmp_path)
    assert codecs == ["BytesCodec", "ConditionalCodec"]
    assert_same_bits(back, data)


def shard_inner_chunks(shard: bytes, n_inner: int) -> list[bytes]:
    """Inner chunks of a shard whose index (at the end) is bytes + crc32c."""
    index_bytes, index_crc = shard[-(16 * n_inner + 4) : -4], shard[-4:]
    assert int.from_bytes(index_crc, "little") == crc32c.crc32c(index_bytes)
    index = np.frombuffer(index_bytes, dtype="<u8").reshape(n_inner, 2)
    return [shard[int(o) : int(o) + int(n)] for o, n in index]


def test_sharded_conditional_with_crc32c_reads_with_stock_zarr(tmp_path: Path) -> None:
    data = mixed_data((16, 16))
    plan = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [1, 1, 3, 3], [0, 2, 0, 2]], dtype=np.uint8)
    z = zarrext.create_array(
        tmp_path,
        shape=data.shape,
        chunks=(4, 4),
        shards=(8, 16),
        dtype="<f4",
        compressors=[
            ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=3)]),
            Crc32cCodec(),
        ],
        decision=zarrext.from_plan(plan),
    )
    z[:] = data
    metadata = json.loads((tmp_path / "zarr.json").read_text())
    inner = metadata["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "conditional", "crc32c"]

    # Independent check of every inner chunk: crc32c, header, payload.
    for shard_row in range(2):
        chunks = shard_inner_chunks((tmp_path / "c" / str(shard_row) / "0").read_bytes(), 8)
        for k, chunk in enumerate(chunks):
            li, lj = divmod(k, 4)
            i, j = shard_row * 2 + li, lj
            body = chunk[:-4]
            assert int.from_bytes(chunk[-4:], "little") == crc32c.crc32c(body)
            mask, payload = body[0], body[1:]
            assert mask == plan[i, j]
            if mask & 0b10:
                payload = bytes(numcodecs.Zstd().decode(payload))
            block = np.ascontiguousarray(data[i * 4 : (i + 1) * 4, j * 4 : (j + 1) * 4])
            if mask & 0b01:
                assert payload == bytes(
                    numcodecs.Shuffle(elementsize=4).encode(block.view(np.uint8))
                )
            else:
                assert payload == block.tobytes()

    assert_same_bits(zarr.open_array(tmp_path, mode="r")[:], data)
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}):
        assert_same_bits(zarr.open_array(tmp_path, mode="r")[:], data)
    back, codecs = read_in_fresh_process(tmp_path)
    assert codecs == ["ShardingCodec"]
    assert_same_bits(back, data)


def test_stock_partial_shard_write_keeps_zarrext_chunks(tmp_path: Path) -> None:
    """Stock zarr rewriting one inner chunk leaves the others' conditional headers intact."""
    data = np.arange(64, dtype="<u2").reshape(8, 8)
    zarrext.create_array(
        tmp_path,
        shape=data.shape,
        chunks=(4, 4),
        shards=(8, 8),
        dtype="<u2",
        compressors=[ConditionalCodec(codecs=[ZstdCodec(level=1)])],
        decision="always_apply",
    )[:] = data
    stock = zarr.open_array(tmp_path, mode="r+")
    stock[0:4, 0:4] = 1  # stock writer: no decision, so this inner chunk is stored raw
    data[0:4, 0:4] = 1
    masks = [c[0] for c in shard_inner_chunks((tmp_path / "c" / "0" / "0").read_bytes(), 4)]
    assert masks == [0, 1, 1, 1]
    assert_same_bits(zarr.open_array(tmp_path, mode="r")[:], data)
