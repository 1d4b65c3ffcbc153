"""``python -m servebook.bench``: see :func:`servebook.bench.cli.main`."""

from .cli import main

raise SystemExit(main())
