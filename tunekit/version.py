"""The installed version of tunekit."""

__version__ = "0.1.0"
