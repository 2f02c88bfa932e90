"""`python -m kcatalog`: the same as the `kcatalog` command."""

from .tools.cli import main

raise SystemExit(main())
