"""Alembic revisions: one module per schema version, each setting meta's schema_version to its number."""
