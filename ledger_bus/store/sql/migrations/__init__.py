"""The SQL store's schema migrations (Alembic), shipped with the package."""
