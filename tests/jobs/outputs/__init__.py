"""Tests of zarrext.jobs.outputs."""
