"""`python -m bench.flops`, whose command is `bench.commands.flops`."""
from bench.commands.flops import main

if __name__ == "__main__":
    raise SystemExit(main())
