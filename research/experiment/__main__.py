"""``python -m research.experiment --out DIR [options]`` (``--help`` lists them)."""

import sys

from research.experiment.cli import main

sys.exit(main())
