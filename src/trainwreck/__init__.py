"""Trainwreck: an executable encyclopedia of ML training failures, and the toolkit that builds it."""

__version__ = "0.1.0"
