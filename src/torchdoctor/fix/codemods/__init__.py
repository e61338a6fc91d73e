"""One module per remedy; ``fix/registry.py`` lists them by id."""
