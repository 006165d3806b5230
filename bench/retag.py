"""`python -m bench.retag`, whose command is `bench.commands.retag`."""
from bench.commands.retag import main

if __name__ == "__main__":
    raise SystemExit(main())
