"""Tests of zarrext.jobs."""
