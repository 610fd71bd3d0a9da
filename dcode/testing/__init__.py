"""Test fixtures that ship with the package: random-weight checkpoints in each family's released
format (checkpoints.py), shared by the tests and benchmarks/make_checkpoints.py."""
