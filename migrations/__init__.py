"""Alembic migration environment of shadow-eval (``env.py``, ``versions/``).

Shipped inside the wheel as a package so that ``shadow-eval db upgrade`` (and
:func:`shadoweval.storage.database.upgrade`) find it with :mod:`importlib`; no
``alembic.ini`` is needed at run time.
"""
