"""The IR: the op table, UOps, dtypes and diagnostics. Depends on nothing else in the project."""
