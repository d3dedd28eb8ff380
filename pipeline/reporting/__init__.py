"""Rendering of the report site from finished asset values (never recomputes a number)."""
