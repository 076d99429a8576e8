"""Peers' own test suites: see conftest.py."""
