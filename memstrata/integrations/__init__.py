"""Adapters for agent frameworks (each needs its extra, e.g. ``memstrata[langgraph]``)."""
