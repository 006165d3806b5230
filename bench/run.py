"""`python -m bench.run`, whose command is `bench.commands.run`."""
from bench.commands.run import main

if __name__ == "__main__":
    raise SystemExit(main())
