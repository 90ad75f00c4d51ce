"""Helpers that several test modules import (`from helpers.refusals import refused`); pytest
fixtures stay in tests/conftest.py."""
