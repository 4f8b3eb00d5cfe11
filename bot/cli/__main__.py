"""``python -m decklog.bot.cli``: the ``decklog`` command."""

import sys

from decklog.bot.cli import main

sys.exit(main())
