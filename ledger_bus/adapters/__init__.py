"""Adapters for the frameworks agents are written in: LangGraph (`adapters.langgraph`) and the
OpenAI Agents SDK (`adapters.openai_agents`). Each needs its extra (`pip install
'ledger-bus[langgraph]'`, `'ledger-bus[openai-agents]'`); the rest of ledger_bus imports without
them."""
