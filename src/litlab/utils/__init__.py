"""Helpers shared by the entry points and the domains (kept free of heavy imports at top)."""
