"""Nominal synergies: file format, library and index, generation per robot kind, selection (docs/controller.md)."""
