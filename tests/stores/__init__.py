"""Tests of zarrext.stores."""
