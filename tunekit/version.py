"""The installed version of tunekit."""

__version__ = "0.2.0"
