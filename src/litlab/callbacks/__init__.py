"""Reusable Lightning callbacks."""
