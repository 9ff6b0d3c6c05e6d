"""What a store written elsewhere needs to be held to the ledger's contract: the contract suite
(`ledger_bus.testing.contract`) and the events its tests write (`ledger_bus.testing.events`)."""

__all__: list[str] = []  # the suite and its events are the submodules contract and events
