"""Readers for recorded-trial file formats (C3D, ...); units are converted to SI here, at the edge."""
