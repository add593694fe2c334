"""A damaged inner chunk, every chain a shard layout admits, every job: one line each
(issue 35 item 5).

Each compressor's decoder fails in its own way on damaged bytes (zlib.error,
RuntimeError, gzip.BadGzipFile, bz2's OSError, lzma.LZMAError, ...): every job that
decodes names the chunk and the codec in one line and exits 1, no traceback; the
jobs that move bytes without decoding them (compact, expand) leave the chunk as it
is. The shards are built by hand (tests/shard_bytes.py): bytes codec, then the
compressor from its own library, or a conditional codec (1-byte header, mask 1)
around it; inner chunk 3 holds zeros instead of its compressed bytes (a hole).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ShardingCodec, ZstdCodec
from zarr.codecs import numcodecs as zarr_numcodecs

from tests.conftest import Run, tree_digest
from tests.shard_bytes import dense_shard
from zarrext.codecs.conditional import ConditionalCodec

INNER = (8, 8)
PER_SHARD = (2, 2)
DAMAGED = 3  # flat index of the damaged inner chunk: (1, 1)


@dataclass(frozen=True)
class Compressor:
    name: str  # its name in zarr.json
    codec: Callable[[], object]  # zarr's codec, for the metadata
    library: Callable[[], numcodecs.abc.Codec]  # what encodes the chunks by hand
    bounded: bool  # whether zarrext knows its worst-case size (fixed slots)


COMPRESSORS = [
    Compressor("zstd", ZstdCodec, numcodecs.Zstd, True),
    Compressor("gzip", GzipCodec, numcodecs.GZip, True),
    Compressor("numcodecs.zlib", zarr_numcodecs.Zlib, numcodecs.Zlib, True),
    Compressor("blosc", BloscCodec, numcodecs.Blosc, True),
    Compressor("numcodecs.lz4", zarr_numcodecs.LZ4, numcodecs.LZ4, True),
    Compressor("numcodecs.bz2", zarr_numcodecs.BZ2, numcodecs.BZ2, False),
    Compressor("numcodecs.lzma", zarr_numcodecs.LZMA, numcodecs.LZMA, False),
]


def values() -> np.ndarray:
    return np.linspace(-50, 50, 256, dtype="float32").reshape(16, 16)


def build(path: Path, compressor: Compressor, conditional: bool) -> None:
    """A float32 array of one shard of 2 x 2 inner chunks, inner chunk 3 damaged."""
    codec = compressor.codec()
    zarr.create_array(
        str(path), shape=(16, 16), chunks=(16, 16), dtype="float32", fill_value=0,
        compressors=None,
        serializer=ShardingCodec(chunk_shape=INNER, codecs=[
            BytesCodec(), ConditionalCodec([codec]) if conditional else codec,
        ]),
    )
    data = values()
    chunks = {}
    for flat in range(4):
        i, j = divmod(flat, 2)
        raw = data[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8].astype("<f4").tobytes()
        payload = bytes(compressor.library().encode(raw))
        if flat == DAMAGED:
            payload = bytes(len(payload))
        chunks[flat] = (b"\x01" if conditional else b"") + payload
    (path / "c" / "0").mkdir(parents=True)
    (path / "c" / "0" / "0").write_bytes(dense_shard(4, chunks))


CHAINS = [
    pytest.param(c, cond, id=f"conditional-{c.name}" if cond else c.name)
    for c in COMPRESSORS for cond in (False, True)
]
JOBS = ["check-deep", "check-repair", "check-json", "inspect", "recompress", "quantize",
        "compact", "expand"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Compressor, bool], Path]:
    """Each chain's damaged array, built once; tests work on copies."""
    cache: dict[tuple[str, bool], Path] = {}

    def get(compressor: Compressor, conditional: bool) -> Path:
        key = (compressor.name, conditional)
        if key not in cache:
            cache[key] = tmp_path_factory.mktemp("damaged") / "a.zarr"
            build(cache[key], compressor, conditional)
        return cache[key]

    return get


def lines_naming_the_chunk(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if "inner chunk 3 " in line or "inner chunk [1, 1]" in line]


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize(("compressor", "conditional"), CHAINS)
def test_a_damaged_chunk_is_one_line(
    run: Run, tmp_path: Path, built: Callable[[Compressor, bool], Path],
    compressor: Compressor, conditional: bool, job: str,
) -> None:
    path = tmp_path / "a.zarr"
    shutil.copytree(built(compressor, conditional), path)
    before = tree_digest(path)
    args = {
        "check-deep": ["check", "--deep", path],
        "check-repair": ["check", "--deep", "--repair", path],
        "check-json": ["check", "--deep", "--json", path],
        "inspect": ["inspect", path],
        "recompress": ["recompress", path],
        "quantize": ["quantize", path, "--max-abs-error", "0.1", "--out", tmp_path / "q.zarr"],
        "compact": ["compact", path],
        "expand": ["expand", path],
    }[job]
    code, out, err = run(*args)
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("zarrext: error: ")]
    # a failed job ends in one error line; check's findings are its output instead
    assert len(errors) == (code != 0 and not job.startswith("check")), err
    if errors:
        assert err.splitlines()[-1] == errors[0]

    if job in ("check-deep", "check-repair"):
        assert code == 1
        (line,) = lines_naming_the_chunk(out)
        assert "does not decode" in line
        assert (compressor.name if not conditional else "conditional") in line
        assert tree_digest(path) == before  # nothing --repair can fix
    elif job == "check-json":
        assert code == 1
        (array,) = json.loads(out)["arrays"]
        (finding,) = array["findings"]
        (problem,) = finding["problems"]
        assert problem["kind"] == "undecodable_chunk"
        assert problem["text"].startswith("inner chunk 3 (chunk (1, 1) of the array)")
    elif job == "quantize":
        assert code == 1
        (line,) = lines_naming_the_chunk(err)
        assert line == errors[0]
        assert "chunk 'c/0/0', inner chunk [1, 1]: cannot decode" in line
        assert compressor.name in line
        assert not (tmp_path / "q.zarr").exists()
    elif job == "recompress" and conditional:
        assert code == 1
        (line,) = lines_naming_the_chunk(err)
        assert line.startswith("zarrext: damaged: ")
        assert compressor.name in line
        assert "left 1 damaged chunk under" in errors[0]
    elif job == "recompress":  # nothing to recompress without a conditional codec
        assert code == 1
        assert "no array with a conditional codec" in errors[0]
        assert tree_digest(path) == before
    elif job == "inspect":  # reads conditional headers, never the compressed bytes
        assert code == 0
    elif job == "expand" and not (compressor.bounded or conditional):
        assert code == 1
        assert "has no bound on its encoded size" in errors[0]
        assert tree_digest(path) == before
    else:  # compact, expand: chunks moved as they are, not decoded
        assert code == 0
        np.testing.assert_array_equal(zarr.open_array(str(path))[:8, :], values()[:8, :])
        code, out, _ = run("check", "--deep", path)
        assert code == 1
        assert len(lines_naming_the_chunk(out)) == 1


def test_decode_errors_are_the_codecs_not_the_stores() -> None:
    """bz2 says "Invalid data stream" with an OSError; the store's OSErrors (a missing
    file, a refused connection) are no damaged chunk."""
    import errno

    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.dtype import UInt8

    from zarrext.errors import DECODE_ERRORS, is_decode_error

    spec = ArraySpec((16,), UInt8(), np.uint8(0), ArrayConfig.from_dict({}),
                     default_buffer_prototype())
    damaged = default_buffer_prototype().buffer.from_bytes(bytes(16))
    caught = []
    for compressor in COMPRESSORS:
        try:
            compressor.codec()._decode_sync(damaged, spec)  # type: ignore[attr-defined]
        except DECODE_ERRORS as e:
            caught.append(e)
    assert len(caught) == len(COMPRESSORS)
    assert all(is_decode_error(e) for e in caught), caught
    assert any(type(e) is OSError for e in caught)  # bz2's
    for error in (FileNotFoundError(errno.ENOENT, "gone"), OSError("connection refused"),
                  ConnectionRefusedError(errno.ECONNREFUSED, "refused")):
        with pytest.raises(type(error)) as raised:
            raise error
        assert not is_decode_error(raised.value)
