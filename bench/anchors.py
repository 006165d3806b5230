"""`python -m bench.anchors`, whose command is `bench.commands.anchors`."""
from bench.commands.anchors import main

if __name__ == "__main__":
    raise SystemExit(main())
