"""What zarrext installs into zarr-python and xarray, for its own data types only.

Layer: above :mod:`zarrext.codecs` and :mod:`zarrext.dtypes`, below the pipeline.
The ``zarr.data_type`` entry point loads :mod:`~zarrext.integration.optional`, which
wraps the few zarr-python functions that cannot carry a mask (for optional arrays
alone); :mod:`~zarrext.integration.xarray_compat` names every private xarray name
zarrext touches, as :mod:`zarrext._zarr_compat` does for zarr.

May import: :mod:`zarrext.codecs`, :mod:`zarrext.dtypes`, the base modules
(:mod:`zarrext.errors`, :mod:`zarrext._zarr_compat`, :mod:`zarrext._extras`).
"""
