"""`python -m factory.bench [bench options]`: the same command as `kfactory bench`."""

import sys

from .command import main

sys.exit(main())
