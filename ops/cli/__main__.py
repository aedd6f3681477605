"""``python -m memstrata.ops.cli …``: the same as the ``memstrata`` console script."""

from memstrata.ops.cli import main

raise SystemExit(main())
