"""Tests of zarrext.demo."""
