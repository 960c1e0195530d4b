"""The catalog's schema migrations: Alembic scripts, one per revision (``versions/``)."""
