"""Tests of zarrext.cli."""
