"""Data types that zarrext registers with zarr-python (entry-point group ``zarr.data_type``)."""

from __future__ import annotations

from zarrext.dtypes.optional import OptionalDType
from zarrext.dtypes.optional_conversions import (
    as_optional_array,
    from_arrow,
    from_masked,
    to_arrow,
    to_masked,
)

__all__ = [
    "OptionalDType",
    "as_optional_array",
    "from_arrow",
    "from_masked",
    "to_arrow",
    "to_masked",
]
