"""The store contract as tests: every rule of spec/ledger-v1.md and the README that a store must
keep, over the public API alone, a module per capability (ledger_bus.store.base), so that a store
written outside this repository runs the parts it implements.

Use it from a test module of your own, with a `store` fixture that gives an empty store (a fresh
database, or a fresh key prefix) for each test::

    import pytest
    from ledger_bus.testing.contract import *  # noqa: F403  (every part, collected by pytest)

    @pytest.fixture
    def store():
        with MyStore(...) as fresh:
            yield fresh

A store that implements some capabilities imports those parts alone: the log's first
(`from ledger_bus.testing.contract.log import *`), then `attempts`, `groups`, `bounds`,
`deletes`, `restores` as it grows. Every backend of this repository runs them all
(tests/contract/test_contract.py), each sync store and each asyncio one. Needs pytest
(`pip install 'ledger-bus[testing]'`).
"""

from ledger_bus.store.base import CAPABILITIES
from ledger_bus.testing.contract import attempts, bounds, deletes, groups, log, restores
from ledger_bus.testing.contract.attempts import *  # noqa: F403
from ledger_bus.testing.contract.bounds import *  # noqa: F403
from ledger_bus.testing.contract.deletes import *  # noqa: F403
from ledger_bus.testing.contract.groups import *  # noqa: F403
from ledger_bus.testing.contract.log import *  # noqa: F403
from ledger_bus.testing.contract.restores import *  # noqa: F403

# The parts, each a capability's tests (every one a test_ function, collected by pytest), by the
# capability's name, in the order of CAPABILITIES.
PARTS = {
    capability.what: part
    for capability, part in zip(
        CAPABILITIES, (log, attempts, groups, bounds, deletes, restores), strict=True
    )
}

__all__ = [name for part in PARTS.values() for name in part.__all__]
