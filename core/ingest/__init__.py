"""The post-turn write path: L0 pointer → extract → judge → dedup/upsert into STM."""
