"""`python -m bench.options`, whose command is `bench.commands.options`."""
from bench.commands.options import main

if __name__ == "__main__":
    raise SystemExit(main())
