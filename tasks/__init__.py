"""Celery wiring: the app, thin tasks and the producer-side client.  Domain logic is in core/."""
