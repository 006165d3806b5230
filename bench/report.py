"""`python -m bench.report`, whose command is `bench.commands.report`."""
from bench.commands.report import main

if __name__ == "__main__":
    raise SystemExit(main())
