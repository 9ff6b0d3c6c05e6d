"""Who may use the ledger's HTTP faces (the MCP server, the web view) and what they may do: an
identity (an agent, its sessions, a role) and the bearer tokens that name one."""
