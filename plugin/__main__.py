"""``python -m plugin`` is the same as the ``reflectworld`` command."""

import sys

from plugin.cli import main

sys.exit(main())
