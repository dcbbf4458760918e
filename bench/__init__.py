"""Reproducible benchmarks; results in BENCHMARKS.md."""
