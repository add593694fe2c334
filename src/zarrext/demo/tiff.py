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
    # Short cells, folded rather than cut, so that the table fits 80 columns (the
    # header's kind goes in the caption); the longest names keep their width.
    for column, min_width in (
        ("array", 12),
        ("TIFF compression", 13),
        ("chunk file", 9),
        ("tifffile == chunk", None),
        ("zarr read == image", None),
    ):
        table.add_column(column, overflow="fold", min_width=min_width)
    for compression in (None, "zstd", "deflate"):
        path = root / f"tiff_{compression or 'raw'}.zarr"
        # create_kwargs' pad codec carries the TIFF header function: each chunk's own
        # header. zarr.json holds one static header, which pad writes as it is for a
        # writer given no function, so a writer that opens the array later gives it again.
        array = zarrext.create_array(
            str(path),
            shape=SHAPE,
            overwrite=True,
            **tiff.create_kwargs(CHUNKS, "uint16", compression=compression),
        )
        array[:] = image
        header_function = tiff.dynamic_header("uint16", compression=compression)
        reopened = zarrext.open_array(str(path), padding=header_function)
        reopened[256:512, 512:768] = image[256:512, 512:768]  # chunk (1, 2), rewritten
        chunk_file = path / "c" / "1" / "2"
        with tifffile.TiffFile(chunk_file) as tf:
            page = tf.pages[0]
            from_tiff = tf.asarray()
            tiff_compression = tifffile.COMPRESSION(page.compression).name
        expected = image[256:512, 512:768]
        table.add_row(
            path.stem,
            tiff_compression,
            f"{chunk_file.stat().st_size:,} B",
            _verdict(np.array_equal(from_tiff, expected)),
            _verdict(np.array_equal(zarr.open_array(str(path))[:], image)),
        )
    table.caption = escape(
        f"Each chunk starts with a {tiff.header_nbytes('uint16')}-byte TIFF header computed "
        "per chunk by the padding function the writers pass (tiff.dynamic_header), so that "
        "its StripByteCounts follows the chunk's compressed size; zarr.json holds a static "
        "header, which pad writes literally for writers without it. Codecs [bytes(little), "
        "<zstd | zlib>, pad(start)]: the header stays outside the compressed strip."
    )
    console.print(table)
