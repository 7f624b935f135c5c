"""Sinks for built exchanges: Kafka (with the bounded disk spool) and capture-log files."""
