"""Root of the test tree (puts tests/ on sys.path so `shared_data` is importable)."""
