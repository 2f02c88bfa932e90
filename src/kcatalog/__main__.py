"""`python -m kcatalog`: the same as the `kcatalog` command."""

from .cli import main

raise SystemExit(main())
