"""Dagster code location: the fusion precision experiments as materialized assets."""
