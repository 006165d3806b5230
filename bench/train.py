"""`python -m bench.train`, whose command is `bench.commands.train`."""
from bench.commands.train import main

if __name__ == "__main__":
    raise SystemExit(main())
