"""Alembic revisions, one branch per component: ``authority_*``, ``ltm_*``, ``lifecycle_*``."""
