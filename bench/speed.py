"""`python -m bench.speed`, whose command is `bench.commands.speed`."""
from bench.commands.speed import main

if __name__ == "__main__":
    raise SystemExit(main())
