"""The standard's utility functions."""

from __future__ import annotations

__all__: list[str] = []

# Tensor methods for these functions: {method name: function}.
METHODS: dict = {}
