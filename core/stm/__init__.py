"""L2 short-term memory in Redis: one hash per item plus sorted-set indexes (DESIGN §3)."""
