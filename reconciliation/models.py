"""Reconciliation runs and their findings (filled in by the reconciliation work)."""
