"""The REST service, an entry process like the CLI: ``create_app`` in :mod:`.app`, run by
``memstrata api`` (uvicorn).  Needs the ``[server]`` extra (FastAPI, uvicorn)."""
