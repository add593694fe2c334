"""Other formats read and written through zarrext's codecs.

N5 containers read in place through ``n5_default`` (:mod:`~zarrext.formats.n5`) and
chunks that are TIFF files through ``pad`` (:mod:`~zarrext.formats.tiff`).

Layer: above :mod:`zarrext.codecs` (beside :mod:`zarrext.integration`, neither
importing the other), below the pipeline; may import the codecs, the data types and
the base modules.
"""
