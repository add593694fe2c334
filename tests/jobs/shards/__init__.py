"""Tests of zarrext.jobs.shards."""
