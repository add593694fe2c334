"""Tests of zarrext.codecs."""
