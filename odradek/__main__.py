"""`python -m odradek`: the same as the `odradek` command."""

import sys

from odradek.cli.main import main

sys.exit(main())
