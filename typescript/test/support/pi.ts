// A Pi agent session as Pi's SDK makes one (createAgentSession), on a fake model provider (no
// network): the tests' and the crash script's. Its working and agent directories are
// temporary, so no user configuration is read.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import {
  createAgentSession,
  DefaultResourceLoader,
  defineTool,
  type AgentSession,
  type ExtensionFactory,
  ModelRuntime,
  type SessionManager,
  SettingsManager,
  type ToolDefinition,
} from "@earendil-works/pi-coding-agent";
import { type FauxResponseStep, fauxProvider, InMemoryCredentialStore } from "@earendil-works/pi-ai";
import { Type } from "typebox";

export { fauxAssistantMessage, fauxText, fauxToolCall } from "@earendil-works/pi-ai";

// One working directory for every session of a process: Pi 1.x keeps the system prompt, which
// names it, as an entry, and sessions compared entry for entry must have been made alike.
const dir = mkdtempSync(join(tmpdir(), "lb-pi-"));

export interface Scripted {
  session: AgentSession;
  calls: Map<string, number>; // tool name -> times run
}

/** A tool that returns `answer(args)` (or waits for `gate` first), counting its runs. */
export function tool(name: string, calls: Map<string, number>, answer: (args: { q: string }) => string, gate?: Promise<void>): ToolDefinition {
  return defineTool({
    name,
    label: name,
    description: `the ${name} tool`,
    parameters: Type.Object({ q: Type.String() }),
    execute: async (_id: string, params: { q: string }) => {
      calls.set(name, (calls.get(name) ?? 0) + 1);
      if (gate) await gate;
      return { content: [{ type: "text" as const, text: answer(params) }], details: { tool: name, q: params.q } };
    },
  });
}

/**
 * A tool that runs `inner` through Pi's `executeTool` once per query word, as a codemode script
 * does: calls Pi makes as nested calls (`<its id>/<n>`, with `parentToolCallId`), which the
 * transcript never shows.
 */
export function nesting(name: string, inner: string, calls: Map<string, number>): ToolDefinition {
  return defineTool({
    name,
    label: name,
    description: `runs ${inner} for each word`,
    parameters: Type.Object({ q: Type.String() }),
    execute: async (_id: string, params: { q: string }, _signal, _update, ctx) => {
      calls.set(name, (calls.get(name) ?? 0) + 1);
      const found: string[] = [];
      for (const word of params.q.split(" ")) {
        const outcome = await ctx.executeTool(inner, { q: word });
        found.push(outcome.result.content.map((c) => (c.type === "text" ? c.text : "")).join(""));
      }
      return { content: [{ type: "text" as const, text: found.join("; ") }], details: { tool: name, q: params.q } };
    },
  });
}

/** An agent session on `sessionManager`, its model answering `responses` in turn. */
export async function scripted(
  sessionManager: SessionManager,
  responses: FauxResponseStep[],
  tools: (calls: Map<string, number>) => ToolDefinition[],
  extension?: ExtensionFactory,
): Promise<Scripted> {
  const faux = fauxProvider();
  faux.setResponses(responses);
  // Pi's model runtime with the fake provider alone: no credentials file, no catalog, no network.
  const modelRuntime = await ModelRuntime.create({ credentials: new InMemoryCredentialStore(), modelsPath: null, allowModelNetwork: false, refreshOnCreate: false });
  modelRuntime.registerNativeProvider(faux.provider);
  await modelRuntime.setRuntimeApiKey(faux.provider.id, "not-a-key");
  const settingsManager = SettingsManager.inMemory();
  const resourceLoader = new DefaultResourceLoader({
    cwd: dir,
    agentDir: join(dir, "agent"),
    settingsManager,
    extensionFactories: extension ? [extension] : [],
    noSkills: true,
    noPromptTemplates: true,
    noThemes: true,
    noContextFiles: true,
  });
  await resourceLoader.reload();
  const calls = new Map<string, number>();
  const defined = tools(calls);
  const { session } = await createAgentSession({
    cwd: dir,
    agentDir: join(dir, "agent"),
    modelRuntime,
    settingsManager,
    resourceLoader,
    model: faux.getModel(),
    sessionManager,
    customTools: defined,
    tools: defined.map((t) => t.name),
  });
  return { session, calls };
}
