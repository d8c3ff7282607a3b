"""The pure core: models and decisions, no I/O, no clock, no global randomness."""
