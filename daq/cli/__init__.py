"""The `hil` command line: one module per command group; nothing imports the CLI."""
