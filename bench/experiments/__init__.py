"""Prototypes of product changes, run by the benchmarks to price a recommended fix."""
