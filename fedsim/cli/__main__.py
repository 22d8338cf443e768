"""``python -m fedsim.cli``: the ``fedsim`` command."""

import sys

from fedsim.cli import main

sys.exit(main())
