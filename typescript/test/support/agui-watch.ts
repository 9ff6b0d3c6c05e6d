/**
 * A front end's watch of a ledger session over AG-UI, with AG-UI's own client (`@ag-ui/client`),
 * for tests/ui/test_agui.py: every event the client hands on, after its own checks (its schema,
 * then its verifier's order rules), printed as a JSON line on stdout.
 *
 *   node --import tsx test/support/agui-watch.ts URL [--token T] [--stop-after N] [--until TYPE]
 *
 * The web view's stream is a GET (`/s/<session>/ag-ui`), so the agent's request is one; the
 * client is otherwise AG-UI's HttpAgent as a front end makes it. `--stop-after N` cuts the
 * connection after N events, as a dropped network would; `--until TYPE` ends the watch after the
 * first event of that type. The last line is `{"end": "stopped"}`, or `{"error": message}` when
 * the client refused the stream (the process then exits 1).
 */

import { EventType, HttpAgent, type BaseEvent } from "@ag-ui/client";

class Watch extends HttpAgent {
  protected override requestInit(): RequestInit {
    return {
      method: "GET",
      headers: { ...this.headers, Accept: "text/event-stream" },
      signal: this.abortController.signal,
    };
  }
}

function option(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : undefined;
}

async function main(): Promise<void> {
  const url = process.argv[2];
  if (!url) throw new Error("usage: agui-watch.ts URL [--token T] [--stop-after N] [--until TYPE]");
  const token = option("--token");
  const stopAfter = Number(option("--stop-after") ?? "0");
  const named = option("--until");
  const until = named === undefined ? undefined : EventType[named as keyof typeof EventType];
  const agent = new Watch({ url, headers: token ? { Authorization: `Bearer ${token}` } : {} });
  let seen = 0;
  const watch = { stopped: false };
  const stop = (): void => {
    watch.stopped = true;
    agent.abortRun();
  };
  await agent.runAgent(
    {},
    {
      onEvent: ({ event }: { event: BaseEvent }) => {
        if (watch.stopped) return; // the client's own word on the abort, not the stream's
        seen += 1;
        process.stdout.write(JSON.stringify(event) + "\n");
        if ((stopAfter && seen >= stopAfter) || (until !== undefined && event.type === until)) stop();
      },
    },
  );
  process.stdout.write(JSON.stringify({ end: watch.stopped ? "stopped" : "ended" }) + "\n");
}

main().catch((err: unknown) => {
  process.stdout.write(JSON.stringify({ error: err instanceof Error ? err.message : String(err) }) + "\n");
  process.exit(1);
});
