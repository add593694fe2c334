"""Tests of zarrext.dtypes."""
