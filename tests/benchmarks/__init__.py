"""Tests of the benchmarks in benchmarks/ (timing, plots, the convert benchmark)."""
