"""`ledger-bus ui`: a small, self-hosted, read-only live view of a ledger in the browser.

Needs the `ui` extra (starlette, sse-starlette, uvicorn, jinja2): `pip install 'ledger-bus[ui]'`.
"""
