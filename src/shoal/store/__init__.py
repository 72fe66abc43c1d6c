"""Persistence: SQLAlchemy 2 async models, repositories, migrations; PostgreSQL or SQLite."""
