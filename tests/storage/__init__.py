"""Tests of shadoweval.storage and the Alembic migrations, on SQLite and PostgreSQL."""
