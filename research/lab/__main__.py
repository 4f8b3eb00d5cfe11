"""``python -m research.lab run ...`` (``--help`` lists the options)."""

import sys

from research.lab.cli import main

sys.exit(main())
