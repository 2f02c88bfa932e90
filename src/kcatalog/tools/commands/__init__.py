"""The `kcatalog` subcommands, one module each: `add_parser(subparsers)` declares it, `run(options)` runs it."""
