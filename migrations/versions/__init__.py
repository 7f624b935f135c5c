"""Alembic revisions, one module per revision (``NNNN_<slug>.py``)."""
