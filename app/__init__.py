"""idmint: a networked ID-issuing service."""

__version__ = "0.1.0"
