"""``python -m ops.cli …``: the same as the ``memstrata`` console script."""

from ops.cli import main

raise SystemExit(main())
