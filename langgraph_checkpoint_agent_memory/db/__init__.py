"""The only package that knows SQL: plans, drivers, dialects, schema and migrations."""
