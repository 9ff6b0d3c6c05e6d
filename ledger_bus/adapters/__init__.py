"""Adapters for the frameworks agents are written in and the protocols they speak: LangGraph
(`adapters.langgraph`), the OpenAI Agents SDK (`adapters.openai_agents`), Google ADK
(`adapters.adk`) and A2A servers (`adapters.a2a`). Each needs its extra (`pip install
'ledger-bus[langgraph]'`, `'ledger-bus[openai-agents]'`, `'ledger-bus[adk]'`,
`'ledger-bus[a2a]'`); the rest of ledger_bus imports without them."""
