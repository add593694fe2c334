"""Tests of the documentation: every example in README.md and docs/, and the built site."""
