"""``python -m bot.cli``: the ``decklog`` command."""

import sys

from bot.cli import main

sys.exit(main())
