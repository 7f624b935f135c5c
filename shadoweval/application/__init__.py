"""The application layer: the only code that joins stages."""
