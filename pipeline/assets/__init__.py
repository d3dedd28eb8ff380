"""One module per experiment; ``definitions.py`` collects every asset and check from here."""
