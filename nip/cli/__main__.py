"""``python -m nip.cli``: the ``nip`` command."""

import sys

from nip.cli import main

sys.exit(main())
