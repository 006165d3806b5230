"""`python -m bench.verify`, whose command is `bench.commands.verify`."""
from bench.commands.verify import main

if __name__ == "__main__":
    raise SystemExit(main())
