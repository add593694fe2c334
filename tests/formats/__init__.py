"""Tests of zarrext.formats."""
