"""Optional parts of zarrext and the one line that says how to install a missing one.

The core install (codecs, data types, the runtime and library jobs) needs zarr,
numpy and a few codec libraries only. Command line and plots, Dask, Arrow, TIFF
files, remote stores and icechunk repositories are extras (``pyproject.toml``);
code that needs one imports it inside :func:`needs`, which turns the
``ModuleNotFoundError`` of a missing package into a :class:`MissingExtraError`
naming the extra to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXTRAS", "MissingExtraError", "needs"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "cli": ("typer", "rich"),
    "plot": ("matplotlib",),
    "dask": ("dask", "distributed"),
    "arrow": ("pyarrow",),
    "tiff": ("tifffile",),
    "remote": ("fsspec",),
    "icechunk": ("icechunk",),
}
"""Extra name -> the top-level packages it installs (``all`` is every one of them)."""


class MissingExtraError(ImportError):
    """A part of zarrext was used whose optional packages are not installed."""


@contextmanager
def needs(extra: str, what: str) -> Iterator[None]:
    """Imports in this block belong to ``extra``: a missing one says how to install it.

    Parameters
    ----------
    extra : str
        A key of :data:`EXTRAS`, or ``"all"``.
    what : str
        What needs it, for the message (``"zarrext.to_arrow"``).

    Raises
    ------
    MissingExtraError
        When a package of ``extra`` is not installed. Other import errors (a
        package that is installed but broken, a module outside the extra) pass
        through unchanged.
    """
    packages = (
        {p for group in EXTRAS.values() for p in group} if extra == "all" else set(EXTRAS[extra])
    )
    try:
        yield
    except ModuleNotFoundError as e:
        package = (e.name or "").split(".")[0]
        if package not in packages:
            raise
        raise MissingExtraError(
            f"{what} needs {package}, which is not installed: pip install 'zarrext[{extra}]'"
        ) from e
