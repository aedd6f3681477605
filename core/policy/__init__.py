"""Pure decision rules: what is worth writing, for how long, and how important it is."""
