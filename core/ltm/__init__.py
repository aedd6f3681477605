"""Long-term memory (seed 1 第3层 and 七, seed 2 §2.2): cards in a PostgreSQL ledger,
projected by card id into a lexical index (Milvus BM25 or Elasticsearch) and a vector
index (Milvus), searched lexically, by meaning, or both.  See docs/LTM.md.

Submodules are imported directly (``core.ltm.ledger``, ``core.ltm.search`` ...), so that
importing the package loads neither pymilvus, elasticsearch nor an embedding model.
"""
