"""memstrata core: domain rules, models and storage adapters.

Nothing in this package imports Celery; `tasks/` wraps these functions for the workers and
the CLI and tests call them directly.
"""
