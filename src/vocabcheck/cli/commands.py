"""Importing this module registers every command on the app."""

from . import demo, models  # noqa: F401
