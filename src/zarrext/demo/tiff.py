"""Demo: every stored chunk is a TIFF file (``pad`` with a TIFF header)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile
import zarr
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import zarrext
from zarrext.formats import tiff

SHAPE = (600, 1000)
CHUNKS = (256, 256)


def sample_image() -> np.ndarray:
    """A smooth uint16 image (compressible, as microscopy backgrounds are)."""
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]]
    image = 20000 + 15000 * np.sin(x / 90) * np.cos(y / 70)
    return image.astype(np.uint16)


def _verdict(same: bool) -> str:
    return "identical" if same else "[red]DIFFERENT[/red]"


def run(root: Path, console: Console) -> None:
    image = sample_image()
    table = Table(title="Each chunk file opened with tifffile (chunk (1, 2))")
    for column in (
        "array",
        "header",
        "TIFF compression",
        "chunk file",
        "tifffile == chunk",
        "zarr read == image",
    ):
        table.add_column(column)
    for compression in (None, "zstd", "deflate"):
        path = root / f"tiff_{compression or 'raw'}.zarr"
        array = zarrext.create_array(
            str(path),
            shape=SHAPE,
            overwrite=True,
            **tiff.create_kwargs(CHUNKS, "uint16", compression=compression),
        )
        array[:] = image
        chunk_file = path / "c" / "1" / "2"
        with tifffile.TiffFile(chunk_file) as tf:
            page = tf.pages[0]
            from_tiff = tf.asarray()
            tiff_compression = tifffile.COMPRESSION(page.compression).name
        expected = image[256:512, 512:768]
        header = "static, in zarr.json" if compression is None else "per chunk (function)"
        table.add_row(
            path.name,
            f"{tiff.header_nbytes('uint16')} B {header}",
            tiff_compression,
            f"{chunk_file.stat().st_size:,} B",
            _verdict(np.array_equal(from_tiff, expected)),
            _verdict(np.array_equal(zarr.open_array(str(path))[:], image)),
        )
    table.caption = escape(
        "codecs [bytes(little), <zstd | zlib>, pad(start)]: the header stays outside the "
        "compressed strip, and its StripByteCounts follows each chunk's compressed size"
    )
    console.print(table)
