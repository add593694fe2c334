"""The corpus's value files: plain arrays any language reads (FORMAT.md).

A case's values (``expected``, ``input``) are one ``.npy`` file of a plain data type
(``<stem>.npy``); for the ``optional`` data type, the innermost values there and the
validity beside them in ``<stem>.valid.npy``: bool, shaped ``[depth, *shape]``, level 0
the outermost optional. An element is present at level ``l`` when ``valid[0..l]`` are
all true; a value (or an inner level's validity) where it is not present is 0 (false)
and means nothing. In memory (adapters, the runner) optional values are numpy records
``(value, valid)``, nested for nested optionals.

This module never imports zarrext.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

VALID_SUFFIX = ".valid.npy"


def depth(dtype: np.dtype) -> int:
    """How many optional levels ``dtype``'s records nest (0 for a plain type)."""
    n = 0
    while dtype.names:
        dtype, n = dtype["value"], n + 1
    return n


def split(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` as (innermost values, validity ``[depth, *shape]``), or (values, None)."""
    n = depth(values.dtype)
    if n == 0:
        return np.ascontiguousarray(values), None
    valid = np.zeros((n, *values.shape), bool)
    level = values
    present = np.ones(values.shape, bool)
    for i in range(n):
        present = present & level["valid"]
        valid[i] = present
        level = level["value"]
    inner = np.where(present, level, np.zeros((), level.dtype)).astype(level.dtype)
    return np.ascontiguousarray(inner), valid


def join(values: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """The in-memory records of values and validity as :func:`split` gives them."""
    if valid is None:
        return values
    dtype = values.dtype
    for _ in range(valid.shape[0]):
        dtype = np.dtype([("value", dtype), ("valid", "?")])
    out = np.zeros(values.shape, dtype)
    level = out
    for i in range(valid.shape[0]):
        level["valid"] = valid[i]
        level = level["value"]
    level[...] = values
    return out


def save(folder: Path, stem: str, values: np.ndarray) -> dict[str, dict[str, Any]]:
    """``values`` into ``folder/<stem>.npy`` (and ``<stem>.valid.npy``); the files'
    descriptors (:func:`describe`), by file name."""
    plain, valid = split(values)
    out = {}
    for name, array in ((f"{stem}.npy", plain), (f"{stem}{VALID_SUFFIX}", valid)):
        if array is None:
            continue
        with (folder / name).open("wb") as f:
            np.save(f, array, allow_pickle=False)
        out[name] = describe(folder / name)
    return out


def describe(path: Path) -> dict[str, Any]:
    """What a reader needs to take the elements of a ``.npy`` file without parsing its
    header: data type (a zarr v3 name), shape, and where the raw elements begin."""
    with path.open("rb") as f:
        version = np.lib.format.read_magic(f)
        assert version == (1, 0), (path, version)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        offset = f.tell()
    assert not fortran, path
    assert dtype.byteorder in ("<", "|", "="), (path, dtype)
    return {"data_type": dtype.name, "shape": list(shape), "data_offset": offset,
            "byte_order": "little", "order": "C"}


def load(folder: Path, stem: str) -> np.ndarray:
    """The values of ``folder/<stem>.npy`` (with its validity, when there is one), as
    in-memory records for optional types."""
    values = np.load(folder / f"{stem}.npy", allow_pickle=False)
    valid_path = folder / f"{stem}{VALID_SUFFIX}"
    valid = np.load(valid_path, allow_pickle=False) if valid_path.exists() else None
    return join(values, valid)


def validity_path(path: str | Path) -> Path:
    """The validity file beside a values file: ``X.npy`` -> ``X.valid.npy``."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".npy") + VALID_SUFFIX)


def save_file(path: str | Path, values: np.ndarray) -> None:
    """``values`` into the ``.npy`` file ``path``, as the ``cmd:`` protocol passes them:
    plain values, and for an optional type their validity beside (:func:`validity_path`)."""
    plain, valid = split(values)
    np.save(path, plain, allow_pickle=False)
    if valid is not None:
        np.save(validity_path(path), valid, allow_pickle=False)


def load_file(path: str | Path) -> np.ndarray:
    """The values :func:`save_file` saved at ``path`` (in-memory records for an optional
    type, when its validity file is beside it)."""
    values = np.load(path, allow_pickle=False)
    valid_path = validity_path(path)
    return join(values, np.load(valid_path, allow_pickle=False) if valid_path.exists() else None)
