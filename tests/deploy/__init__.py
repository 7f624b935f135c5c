"""Deployment tests: the compose topology as processes (issue 15)."""
