"""The live demo (an orchestrator and three workers, one ledger) and the private Redis it
starts when none is given."""
