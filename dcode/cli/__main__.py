"""`python -m dcode.cli`."""

from dcode.cli import main

main()
