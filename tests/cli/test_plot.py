"""``zarrext inspect --plot``: what the picture shows, checked on the figure and the image."""

from __future__ import annotations

import itertools
from math import prod
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec

import zarrext
from tests.conftest import Run
from zarrext.cli.plot import as_image, plot_file, plot_inventories, shard_edges, tile_layout
from zarrext.cli.render import mask_name
from zarrext.jobs.inspection import ArrayInventory, array_chunks_per_shard, inventory

pytest.importorskip("matplotlib")

CODECS = [{"name": "shuffle", "configuration": {"element_size": 4}},
          {"name": "zstd", "configuration": {"level": 5}}]


def make_store(path: Path) -> None:
    """A group: a sharded conditional array, partly written, and a plain array."""
    group = zarr.open_group(str(path), mode="w")
    group.create_array("plain", shape=(40, 30), chunks=(4, 5), dtype="f4")[:20] = 1.0
    cond = zarrext.create_array(
        str(path / "cond"), shape=(64, 96), chunks=(32, 32), dtype="f4", fill_value=0,
        compressors=None, shard_layout="fixed-slot",
        serializer=ShardingCodec(
            chunk_shape=(8, 8), codecs=[BytesCodec(), zarrext.ConditionalCodec(CODECS)]
        ),
    )
    cond[:8, :8] = 1  # compresses ~20x
    cond[8:40, 8:40] = np.random.default_rng(0).random((32, 32))  # barely compresses
    cond[48:56, 48:] = np.linspace(0, 1, 48 * 8, dtype="f4").reshape(8, 48)
    zarrext.recompress(str(path / "cond"), decision="compress_if_smaller")


def _inventories(path: Path) -> tuple[list[ArrayInventory], dict[str, tuple[int, ...]]]:
    group = zarr.open_group(str(path), mode="r")
    arrays = [group[name] for name in ("cond", "plain")]
    shards = {a.path: s for a in arrays if (s := array_chunks_per_shard(a)) is not None}
    return [inventory(a) for a in arrays], shards


def _legend_texts(ax: object) -> list[str]:
    legend = ax.get_legend()  # type: ignore[attr-defined]
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def test_plot_reads_at_a_glance(tmp_path: Path) -> None:
    import matplotlib.image
    from matplotlib.colors import LogNorm

    make_store(tmp_path / "s.zarr")
    inventories, shards = _inventories(tmp_path / "s.zarr")
    cond, plain = inventories
    fig = plot_inventories(inventories, tmp_path / "grid.png", "s.zarr", shards)

    # the file is the figure, decoded back: its size in pixels
    picture = matplotlib.image.imread(tmp_path / "grid.png")
    width, height = fig.get_size_inches() * 100
    assert picture.shape[:2] == (round(height), round(width))
    assert len(np.unique(picture.reshape(-1, picture.shape[-1]), axis=0)) > 10  # not blank

    # no empty panel: the plain array has the ratio panel alone, every axes draws data
    assert all(ax.has_data() for ax in fig.axes)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert sorted(panels) == [
        "s.zarr/cond: codecs applied per chunk",
        "s.zarr/cond: compression ratio per chunk",
        "s.zarr/plain: compression ratio per chunk",
    ]

    # masks named by the codecs they applied, with never-written chunks and shard lines
    names = [c["name"] for c in CODECS]
    unwritten = prod(cond.grid_shape) - len(cond.chunks)
    assert set(cond.mask_counts) == {0, 0b11}  # the random block stays raw
    assert _legend_texts(panels["s.zarr/cond: codecs applied per chunk"]) == [
        *(f"{mask_name(m, names)} ({n} chunks)" for m, n in sorted(cond.mask_counts.items())),
        f"not written ({unwritten} chunks)",
        "shard boundary",
    ]
    assert "raw (" in _legend_texts(panels["s.zarr/cond: codecs applied per chunk"])[0]
    plain_legend = _legend_texts(panels["s.zarr/plain: compression ratio per chunk"])
    assert plain_legend == [f"not written ({prod(plain.grid_shape) - len(plain.chunks)} chunks)"]

    # shard boundaries: a line between every two neighbouring shards, none elsewhere
    ratio_ax = panels["s.zarr/cond: compression ratio per chunk"]
    lines = [ln for ln in ratio_ax.get_lines() if ln.get_gid() == "shard boundary"]
    vertical = sorted(ln.get_xdata()[0] for ln in lines if ln.get_xdata()[0] == ln.get_xdata()[1])
    horizontal = sorted(ln.get_ydata()[0] for ln in lines if ln.get_ydata()[0] == ln.get_ydata()[1])
    per_shard = shards["cond"]
    assert vertical == [k * per_shard[1] - 0.5 for k in range(1, cond.grid_shape[1] // 4)]
    assert horizontal == [k * per_shard[0] - 0.5 for k in range(1, cond.grid_shape[0] // 4)]
    assert not [ln for ax in fig.axes if "plain" in ax.get_title() for ln in ax.get_lines()]

    # the ratio on a log scale: a 10x chunk lies near the middle of a 1x..100x scale, not
    # in the same colour as the 1x ones as on a linear scale
    (image,) = ratio_ax.get_images()
    assert isinstance(image.norm, LogNorm)
    ratios = cond.grid("ratio")
    finite = ratios[np.isfinite(ratios)]
    assert image.norm.vmin <= finite.min()
    assert image.norm.vmax >= finite.max()
    low, high = float(finite.min()), float(finite.max())
    middle = float(np.sqrt(low * high))
    assert high / low > 10
    assert image.norm(middle) == pytest.approx(0.5, abs=0.01)


def _edges_between_shards(grid: tuple[int, ...], per_shard: tuple[int, ...], side: int) -> list:
    """Image edges (``side`` 0: between rows, 1: between columns) where two neighbouring
    chunks of the picture lie in different shards along the axis drawn that way."""
    axis = len(grid) - 2 + side
    picture = as_image(np.indices(grid)[axis].astype(float))  # chunk index per cell
    if side == 0:
        picture = picture.T
    with np.errstate(invalid="ignore"):  # the gaps between tiles (inf) have no shard
        shard = picture // per_shard[axis]
    edges = []
    for c in range(picture.shape[1] - 1):
        both = np.isfinite(picture[:, c]) & np.isfinite(picture[:, c + 1])  # not a gap
        if (shard[both, c] != shard[both, c + 1]).any():
            edges.append(c + 0.5)
    return edges


@pytest.mark.parametrize(
    ("grid", "per_shard"),
    [((8, 12), (4, 4)), ((3, 5, 4), (2, 2, 3)), ((2, 2, 6, 6), (1, 1, 2, 3))],
)
def test_shard_edges_match_shard_coordinates(
    grid: tuple[int, ...], per_shard: tuple[int, ...]
) -> None:
    assert shard_edges(grid, per_shard) == (
        _edges_between_shards(grid, per_shard, 0), _edges_between_shards(grid, per_shard, 1)
    )
    assert shard_edges((7,), (7,)) == ([], [])
    assert shard_edges((9,), (4,)) == ([], [3.5, 7.5])


@pytest.mark.parametrize("shape", [(8, 4, 4), (2, 3, 4, 5), (20, 1, 3)])
def test_an_nd_grid_is_tiles_of_its_last_two_axes(tmp_path: Path, shape: tuple[int, ...]) -> None:
    """A 3-D or 4-D chunk grid is a near-square picture of tiles, one per index of
    the leading axes, labelled, with every chunk once and gaps that are no chunk."""
    grid = np.arange(prod(shape), dtype=float).reshape(shape)
    image = as_image(grid)
    down, across = tile_layout(shape)
    assert down * across >= prod(shape[:-2]) > (down - 1) * across
    assert sorted(image[np.isfinite(image)].tolist()) == grid.ravel().tolist()
    assert 1 / 4 <= image.shape[0] / image.shape[1] <= 4 or min(down, across) == 1
    # a partly written array: the gaps are not counted as chunks not written
    array = zarrext.create_array(str(tmp_path / "a.zarr"), shape=shape, chunks=(1,) * len(shape),
                                 dtype="f4", fill_value=0)
    array[:1] = np.random.default_rng(1).random((1, *shape[1:])).astype("f4") + 1
    fig = plot_inventories([inventory(array)], tmp_path / "a.png", "a.zarr")
    (ax,) = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    labels = [t.get_text() for t in ax.texts if t.get_gid() == "tile label"]
    assert labels == [",".join(map(str, i)) for i in np.ndindex(shape[:-2])]
    legend = ax.get_legend()
    unwritten = prod(shape) - prod(shape[1:])
    texts = [t.get_text() for t in legend.get_texts()] if legend is not None else []
    assert f"not written ({unwritten} chunks)" in texts


def test_plot_file_name(tmp_path: Path) -> None:
    assert plot_file(tmp_path / "out") == tmp_path / "out.png"
    assert plot_file(tmp_path / "out.svg") == tmp_path / "out.svg"


def test_cli_plot_writes_the_file_it_names(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import matplotlib.image

    make_store(tmp_path / "s.zarr")
    monkeypatch.chdir(tmp_path)
    code, out, err = run("inspect", "s.zarr", "--plot", "out")
    assert code == 0, err
    assert "plot written to out.png" in out
    assert not (tmp_path / "out").exists()
    assert matplotlib.image.imread(tmp_path / "out.png").ndim == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers

    code, out, err = run("inspect", "s.zarr", "--plot", "grid.png", "--json")
    assert code == 0, err
    assert json.loads(out)["plot"] == {"file": "grid.png", "arrays": 2}
    assert (tmp_path / "grid.png").stat().st_size > 0


@pytest.mark.parametrize("target", ["grid.bogus", "s.zarr"], ids=["unknown-format", "directory"])
def test_cli_plot_refuses_what_it_cannot_write(run: Run, tmp_path: Path, target: str) -> None:
    make_store(tmp_path / "s.zarr")
    code, out, err = run("inspect", tmp_path / "s.zarr", "--plot", tmp_path / target)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "--plot" in err
    assert not (tmp_path / "grid.bogus").exists()


def _visible_labels(axis: object) -> list[object]:
    lo, hi = sorted(axis.get_view_interval())  # type: ignore[attr-defined]
    return [
        tick.label1 for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]  # type: ignore[attr-defined]
        if tick.label1.get_visible() and tick.label1.get_text()
        and lo - 1e-9 <= tick.get_loc() <= hi + 1e-9
    ]


@pytest.mark.parametrize(
    ("shape", "chunks"), [((4, 4), (4, 4)), ((16, 16), (4, 4)), ((8, 4, 4), (1, 2, 1))],
    ids=["one chunk", "2-D", "3-D"],
)
def test_plot_ticks_are_chunk_indices_and_colour_bar_labels_apart(
    tmp_path: Path, shape: tuple[int, ...], chunks: tuple[int, ...]
) -> None:
    array = zarrext.create_array(str(tmp_path / "a.zarr"), shape=shape, chunks=chunks,
                                 dtype="f4")
    # ratios within less than a decade: a log axis would label its minor ticks
    array[:] = np.random.default_rng(1).random(shape).astype("f4")
    fig = plot_inventories([inventory(array)], tmp_path / "a.png", "a.zarr")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    grids = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert grids
    assert bars
    for ax in grids:
        for axis, extent in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            cells = round(abs(extent[1] - extent[0]))
            for text in _visible_labels(axis):
                value = text.get_text().replace("\u2212", "-")  # type: ignore[attr-defined]
                assert value.isdigit(), value  # a whole, non-negative chunk index
                assert int(value) < cells
    for bar in bars:
        labels = _visible_labels(bar.xaxis)
        assert len(labels) >= 2
        boxes = sorted((t.get_window_extent(renderer) for t in labels),  # type: ignore[attr-defined]
                       key=lambda b: b.x0)
        for left, right in itertools.pairwise(boxes):
            assert left.x1 <= right.x0, "colour-bar labels overlap"


def test_colour_bar_labels_apart_beside_the_mask_panel(tmp_path: Path) -> None:
    """Ratios from ~1x to ~50x under the narrow bar of a two-panel row: matplotlib's
    log labels (2x10^0, 3x10^0, ...) ran into each other there."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from zarr.codecs import ZstdCodec

    array = zarrext.create_array(
        str(tmp_path / "c.zarr"), shape=(64, 64), chunks=(16, 16), dtype="f4", fill_value=0,
        decision="compress_if_smaller", compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
    )
    rng = np.random.default_rng(1)
    data = np.zeros((64, 64), "f4")
    for i, j in np.ndindex(4, 4):
        bits = 2 * (i * 4 + j)  # from a constant chunk to 30 random bits per value
        data[i * 16:(i + 1) * 16, j * 16:(j + 1) * 16] = (
            rng.integers(0, 2**bits, (16, 16)) if bits else 7
        )
    array[:] = data
    inv = inventory(array)
    ratios = inv.grid("ratio")
    assert np.nanmax(ratios) / np.nanmin(ratios) > 10  # more than a decade
    fig = plot_inventories([inv], tmp_path / "c.png", "c.zarr")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    labels = _visible_labels(bar.xaxis)
    assert len(labels) >= 3
    boxes = sorted((t.get_window_extent(canvas.get_renderer())  # type: ignore[attr-defined]
                    for t in labels), key=lambda b: b.x0)
    for left, right in itertools.pairwise(boxes):
        assert left.x1 <= right.x0, "colour-bar labels overlap"
