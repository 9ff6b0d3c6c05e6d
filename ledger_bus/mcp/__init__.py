"""`ledger-bus mcp`: the ledger served to any MCP client (the `mcp` extra)."""
