/**
 * What an event means for the open attempts a store keeps (spec/ledger-v1.md, "Open attempts"),
 * in the notation append.lua takes: a tool_call opens its attempt, a tool_result closes it, a
 * `reconcile.unresolved` mutation flags the attempt whose tool_call it names, and a
 * `tool.declared` mutation marks a run's tool safe to replay.
 */

import { CURSOR_PATTERN } from "./ids.js";
import type { Fields } from "./events.js";

const NAME = /^[^\x00-\x1f\x7f-\x9f]+$/;

/** The note of one event, as append.lua reads it: "" for none. */
export function noteText(data: Fields): string {
  const type = data["type"];
  if (type === "tool_call") {
    return `o\x1f${data["attempt_id"] as string}\x1f${(data["run_id"] as string | undefined) ?? ""}\x1f${data["tool"] as string}`;
  }
  if (type === "tool_result") return `c\x1f${data["attempt_id"] as string}`;
  if (type !== "mutation") return "";
  const attempt = data["attempt_id"];
  if (data["kind"] === "reconcile.unresolved" && typeof attempt === "string") {
    const named = data["call_cursor"];
    if (named === undefined || named === null) return `f\x1f${attempt}\x1f`;
    const match = typeof named === "string" ? CURSOR_PATTERN.exec(named) : null;
    // A call_cursor that is no cursor names no call: the flag marks nothing.
    return match ? `f\x1f${attempt}\x1f${Number(match[1])}-${Number(match[2])}` : "";
  }
  const run = data["run_id"];
  const tool = data["tool"];
  if (
    data["kind"] === "tool.declared" &&
    data["safe_to_replay"] === true &&
    typeof run === "string" &&
    typeof tool === "string" &&
    NAME.test(tool)
  ) {
    return `s\x1f${run}\x1f${tool}`;
  }
  return "";
}

/** Whether an event's note opens an attempt. */
export function opensAttempt(note: string): boolean {
  return note.startsWith("o\x1f");
}

/** The notes of an append as one argument: each begun by \x1e. */
export function luaNotes(notes: string[]): string {
  return "\x1e" + notes.join("\x1e");
}

/**
 * The notes of one append with the requests of attempts it also ends left out (as the Python
 * package's `settled`): such an attempt is never open, and its result's note still closes it
 * should an earlier append have left it open. Changes `notes` and returns it.
 */
export function settled(notes: string[]): string[] {
  const opened = new Map<string, number[]>();
  notes.forEach((note, index) => {
    const [kind, attempt = ""] = note.split("\x1f", 2);
    if (kind === "o") opened.set(attempt, [...(opened.get(attempt) ?? []), index]);
    else if (kind === "c") {
      for (const at of opened.get(attempt) ?? []) notes[at] = "";
      opened.delete(attempt);
    }
  });
  return notes;
}
