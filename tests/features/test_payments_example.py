"""docs/reconcile.md's walk-through of examples/payments.py, run as written: in a folder outside
the repository, with the package's commands on PATH, against a redis-server of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer, free_port
from tests.support.doc_blocks import blocks_of
from tests.support.helpers import ROOT


def walk_through() -> str:
    (block,) = [b for b in blocks_of("docs/reconcile.md") if "payments.py serve" in b.source]
    return block.source


def test_the_walk_through_charges_once_across_a_crash(tmp_path: Path) -> None:
    script = walk_through()
    port = free_port()
    with LocalServer(appendonly=False) as server:
        shutil.copy(ROOT / "examples" / "payments.py", tmp_path / "payments.py")
        script = script.replace("cp examples/payments.py . && ", "")
        script = script.replace("8650", str(port)).replace("redis://127.0.0.1:6379", server.url)
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "LEDGER_BUS_URL": server.url,
            "PYTHONPATH": "",
        }
        # Files, not pipes: the service left running in the background keeps its output open.
        with (tmp_path / "out.txt").open("w") as out_file, (tmp_path / "err.txt").open("w") as errs:
            done = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", script],
                cwd=tmp_path,
                env=env,
                stdout=out_file,
                stderr=errs,
                start_new_session=True,
            )
            try:
                done.wait(120)
            finally:
                os.killpg(done.pid, signal.SIGTERM)  # the service, still running
        out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
        assert done.returncode == 0, err
        lines = out.splitlines()
        assert lines[-1].strip() == "1", out  # one charge on the service's ledger
        paid = json.loads(lines[-2])
        (charge,) = [
            json.loads(line) for line in (tmp_path / "charges.jsonl").read_text().splitlines()
        ]
        assert paid == charge
        assert charge["amount"] == 500
        assert re.search(r"killed: 137", out), out
        with lb.connect(server.url) as store:
            assert store.open_attempts("order-7") == []
            results = [
                e
                for e in store.read_stream(lb.StreamId("order-7", "run-r1"))
                if e.type == "tool_result"
            ]
            (settled,) = results
            assert settled["settled_by"]["state"] == "done"
            assert settled["settled_by"]["evidence"] == {"charge_id": charge["id"], "status": 200}
