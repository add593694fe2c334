"""Tests of zarrext.integration."""
