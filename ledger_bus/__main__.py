from ledger_bus.cli import main

main()
