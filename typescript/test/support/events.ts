// Events as the tests write them, the Python suite's helpers (ledger_bus/testing/events.py).

export function msg(body: unknown, extra: Record<string, unknown> = {}, agent = "a"): Record<string, unknown> {
  return { type: "message", agent, body, ...extra };
}

export function call(attempt: string, runId?: string, tool = "deploy", args: Record<string, unknown> = {}): Record<string, unknown> {
  const event: Record<string, unknown> = { type: "tool_call", agent: "a", tool, args, attempt_id: attempt };
  if (runId) event["run_id"] = runId;
  return event;
}

export function result(attempt: string, tool = "deploy", status = "ok", value: unknown = 1): Record<string, unknown> {
  return { type: "tool_result", agent: "a", tool, attempt_id: attempt, status, result: value };
}
