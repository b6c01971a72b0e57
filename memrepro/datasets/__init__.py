"""Benchmark loaders: one module per benchmark, each returning a :class:`memrepro.types.Benchmark`."""
