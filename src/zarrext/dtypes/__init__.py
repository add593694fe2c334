"""Data types that zarrext registers with zarr-python (entry-point group ``zarr.data_type``).

The ``optional`` (nullable) data type (:mod:`~zarrext.dtypes.optional`) and the
conversions between its (value, valid) records and masked arrays, Arrow arrays and
NaN (:mod:`~zarrext.dtypes.optional_conversions`).

Layer: the bottom of zarrext's layers; may import only the base modules
(:mod:`zarrext.errors`, :mod:`zarrext._zarr_compat`, :mod:`zarrext._nesting`,
:mod:`zarrext._extras`).
"""

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
