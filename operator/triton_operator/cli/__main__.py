"""`python -m triton_operator.cli`: the CLI, as the console script runs it."""

import sys

from . import main

sys.exit(main())
