"""``python -m memstrata.ops.replay …`` (also ``memstrata replay …``)."""

import logging
import sys

from memstrata.ops.replay import main

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
sys.exit(main())
