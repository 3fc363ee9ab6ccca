"""Errors of the site build: the build's error is the one of the common hierarchy
(`trainwreck.errors.BuildError`, reported as `trainwreck build: ...`, exit 1)."""

from __future__ import annotations

from trainwreck.errors import BuildError

__all__ = ["BuildError"]
