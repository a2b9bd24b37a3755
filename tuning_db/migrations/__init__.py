"""Alembic environment and revisions of the tuning database (revision "000N" is schema version N).

Run through tuning_db.schema (opening a database, `kfactory db upgrade`), never on its own: the
caller hands env.py the connection, inside the transaction that holds the schema lock.
"""
