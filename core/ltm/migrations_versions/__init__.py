"""Alembic revisions of the LTM ledger (branch ``ltm``), run by the authority's env."""
