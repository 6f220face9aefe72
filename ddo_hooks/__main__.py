"""``python -m ddo_hooks``: the ``ddo-hooks`` command line."""

import sys

from ddo_hooks.cli import main

if __name__ == "__main__":
    sys.exit(main())
