"""Errors of the site build."""

from __future__ import annotations


class BuildError(Exception):
    """A stage failed; the message is one line for the user."""
