"""Tests of zarrext.sharding."""
