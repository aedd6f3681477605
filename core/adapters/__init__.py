"""Vendor boundaries: one table-driven error map per store client (Redis, PostgreSQL).

Import the submodule you need (``core.adapters.redis``, ``core.adapters.pg``); this
package imports nothing itself, so loading one vendor's map never loads the other's.
"""
