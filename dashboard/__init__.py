"""The operators' Streamlit dashboard: read-only views of runs, verdicts and pairs."""
