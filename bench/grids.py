"""`python -m bench.grids`, whose command is `bench.commands.grids`."""
from bench.commands.grids import main

if __name__ == "__main__":
    raise SystemExit(main())
