"""Jobs on shards: validate and repair, compact and expand, inspect, Dask writes.

Each works on the shards :mod:`zarrext.sharding` lays out and may import it, the
rest of :mod:`zarrext.jobs`, :mod:`zarrext.api` and the layers below. The modules
are the stories: :mod:`~zarrext.jobs.shards.check` (its report in
:mod:`~zarrext.jobs.shards.check_report`, one shard's bytes in
:mod:`~zarrext.jobs.shards.diagnosis`, files a killed writer left in
:mod:`~zarrext.jobs.shards.leftovers`), :mod:`~zarrext.jobs.shards.compact`,
:mod:`~zarrext.jobs.shards.inspect` and :mod:`~zarrext.jobs.shards.dask`.
"""
