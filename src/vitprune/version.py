"""The package version, on its own so that any layer can record it without importing the package's top."""

__version__ = "0.1.0"
