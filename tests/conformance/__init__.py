"""Tests of the conformance corpus in conformance/ (its cases, coverage, format, mutants)."""
