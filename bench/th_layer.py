"""`python -m bench.th_layer`, whose command is `bench.commands.th_layer`."""
from bench.commands.th_layer import main

if __name__ == "__main__":
    raise SystemExit(main())
