"""The database: schema, migrations, every read and write of session data, compact columns, the session lease."""
