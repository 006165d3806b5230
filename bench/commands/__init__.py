"""The commands: argument parsing, exit codes and printing, one module each (`train`, `run`,
`report`, `speed`, `anchors`, `th_layer`, `flops`); the rooms do the work. `python -m
bench.<name>` runs `bench.commands.<name>.main`: `bench/<name>.py` is only that entry point."""
