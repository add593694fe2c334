"""Tests of zarrext.pipeline."""
