"""``zarrext quantize``: copying floating-point arrays stored as small integers.

``zarrext quantize`` is ``zarrext convert``'s quantizing form with its own defaults
(the source's chunks and shards kept, plain zstd, a copy larger than its source
refused): it scans each array and plans its filters
(:mod:`zarrext.jobs.convert.scanning`, :mod:`zarrext.quantization`), and runs the
targets through the conversion engine (:func:`zarrext.jobs.convert.running.
run_conversion`). :mod:`~zarrext.jobs.quantize.copying` copies one array,
:mod:`~zarrext.jobs.quantize.groups` a group; :mod:`zarrext.quantize` is their
public face.

Layer: in :mod:`zarrext.jobs`, above :mod:`zarrext.jobs.convert` (which never
imports it); may import the rest of :mod:`zarrext.jobs`, :mod:`zarrext.api` and every
layer below.
"""
