"""Benchmark harness comparing rsjobs with other Redis-backed Python job systems.

Run it with ``make bench`` (or ``.venv-bench/bin/python -m bench.run``); see bench/README.md.
"""
