"""zarrext for xarray users: the ``zarrext`` engine, which decodes optional (nullable)
variables to NaN (:mod:`~zarrext.xarray.backend`), and ``to_zarr`` writes of
``conditional`` arrays that take the decision zarrext's own writers would
(:mod:`~zarrext.xarray.writes`).

Layer: at the top beside :mod:`zarrext.quantize` (neither imports the other); may
import :mod:`zarrext.api` and the layers below it.
"""
