"""The dashboard's pages, each a Streamlit script run by ``dashboard/app.py`` (``st.Page``).

A package so that the pages ship in the wheel; they are not imported, Streamlit executes
them. The folder is not called ``pages/``: Streamlit would treat that as a legacy
multipage folder next to the entrypoint.
"""
