"""The quantization planner: ``scale_offset`` + ``cast_value`` configurations chosen, no I/O.

:mod:`~zarrext.quantization.planning` chooses the smallest integer type and a scale
that store floating-point values within ``max_abs_error`` (:func:`~zarrext.quantization.
planning.plan_quantization` for a value range, :func:`~zarrext.quantization.planning.plan`
for data), checked with the real codecs (:mod:`zarrext.codecs.filter_roundtrip`);
:mod:`~zarrext.quantization.cf` converts netCDF/CF packing attributes into the same
filters. The jobs that scan and copy arrays quantized use it
(:mod:`zarrext.jobs.convert.scanning`, :mod:`zarrext.jobs.quantize`);
:mod:`zarrext.quantize` is its public face.

Layer: beside :mod:`zarrext.integration` and :mod:`zarrext.formats` (none importing
another), below :mod:`zarrext.pipeline`; may import :mod:`zarrext.codecs` and the
layers below it.
"""
