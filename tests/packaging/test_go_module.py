"""The Go module as a user gets it: its committed files alone (what `go get` fetches, the Lua
copies among them), copied outside the repository, required by a program of the user's own
that runs the README's and docs/go.md's examples against a redis-server. Offline: the
dependencies come from the module cache `make test` filled from go.sum."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ledger_bus.demo.server import LocalServer
from tests.support.gopeer import need_go
from tests.support.helpers import ROOT

PROGRAM = """package main

import (
	"context"
	"encoding/json"
	"os"
	"time"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

func main() {
	if err := run(context.Background()); err != nil {
		failed := map[string]any{"error": model.Name(err), "message": err.Error()}
		_ = json.NewEncoder(os.Stdout).Encode(failed)
		os.Exit(model.ExitCode(err))
	}
}

func run(ctx context.Context) error {
	s, err := ledgerbus.Connect(ctx, "", ledgerbus.WithPrefix("user"))
	if err != nil {
		return err
	}
	defer s.Close()
	stream, err := model.NewStreamID("task-42", "run-coder")
	if err != nil {
		return err
	}
	done, err := s.Append(ctx, stream, 0, "coder:1", []model.Event{model.Message("coder", "on it")})
	if err != nil {
		return err
	}
	last, err := s.Tail(ctx, "task-42", store.TailOptions{N: 20})
	if err != nil {
		return err
	}
	wait := store.WaitOptions{After: last[len(last)-1].Cursor, Timeout: 50 * time.Millisecond}
	fresh, err := s.WaitSession(ctx, "task-42", wait)
	if err != nil {
		return err
	}
	scanned := 0
	for _, err := range s.Session(ctx, "task-42", store.IterOptions{}) {
		if err != nil {
			return err
		}
		scanned++
	}
	rec, err := agent.NewRecorder(s, "task-42", "coder", agent.RecorderOptions{})
	if err != nil {
		return err
	}
	run, err := rec.Start(ctx, agent.RunOptions{RunID: "r1"})
	if err != nil {
		return err
	}
	hits, err := agent.Call[[]string](ctx, run, "search", map[string]any{"q": "jwt"},
		func(ctx context.Context) ([]string, error) { return []string{"a", "b"}, nil })
	if err = run.Finish(ctx, err); err != nil {
		return err
	}
	_, err = s.Append(ctx, stream, 0, "coder:2", []model.Event{model.Message("coder", "late")})
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"first_version": done.FirstVersion, "tail": len(last), "fresh": len(fresh),
		"scanned": scanned, "hits": hits, "conflict": model.Name(err),
	})
}
"""


def test_the_module_builds_outside_the_repository_and_runs_the_documented_examples(
    tmp_path: Path,
) -> None:
    need_go()
    listed = subprocess.run(
        ["git", "ls-files", "go"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    module = tmp_path / "ledger-bus-go"
    for name in listed.stdout.split():
        # The tools module is a module of its own: a user of the SDK never fetches it.
        if name.startswith("go/tools/"):
            continue
        target = module / Path(name).relative_to("go")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, target)
    user = tmp_path / "user"
    user.mkdir()
    (user / "main.go").write_text(PROGRAM)
    (user / "go.mod").write_text(
        "module example.com/user\n\ngo 1.26\n\n"
        "require github.com/ledger-bus/ledger-bus/go v0.0.0\n\n"
        f"replace github.com/ledger-bus/ledger-bus/go => {module}\n"
    )
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off"}

    def go(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["go", *args],
            cwd=user,
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=False,
        )

    # -e: tidy also looks for what the tests of the SDK's own dependencies import (testify for
    # gowebpki/jcs's), which a build never needs and `go mod download` does not bring; with no
    # proxy those are missing, and anything a build needs missing still fails `go run` below.
    tidied = go("mod", "tidy", "-e")
    assert tidied.returncode == 0, tidied.stderr
    with LocalServer(appendonly=False) as server:
        ran = go("run", ".", LEDGER_BUS_URL=server.url)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads(ran.stdout) == {
        "first_version": 1,
        "tail": 1,
        "fresh": 0,
        "scanned": 1,
        "hits": ["a", "b"],
        "conflict": "VersionConflict",
    }
