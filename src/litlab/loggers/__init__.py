"""Loggers that Lightning lacks (named by configs/logger/)."""
