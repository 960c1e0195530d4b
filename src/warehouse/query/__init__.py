"""SQL queries over tables kept in collections, planned into job steps (DuckDB)."""
