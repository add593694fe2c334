"""Tests of zarrext.jobs.convert."""
