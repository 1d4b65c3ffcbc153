"""``python -m servebook.nccl``: see :func:`servebook.nccl.cli.main`."""

import sys

from .cli import main

sys.exit(main())
