// A Pi agent session as Pi's SDK makes one (createAgentSession), on a fake model provider (no
// network): the tests' and the crash script's. Its working and agent directories are
// temporary, so no user configuration is read.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import {
  AuthStorage,
  createAgentSession,
  DefaultResourceLoader,
  defineTool,
  type AgentSession,
  type ExtensionFactory,
  type SessionManager,
  SettingsManager,
  type ToolDefinition,
} from "@mariozechner/pi-coding-agent";
import { type FauxResponseStep, registerFauxProvider } from "@mariozechner/pi-ai";
import { Type } from "typebox";

export { fauxAssistantMessage, fauxText, fauxToolCall } from "@mariozechner/pi-ai";

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

/** An agent session on `sessionManager`, its model answering `responses` in turn. */
export async function scripted(
  sessionManager: SessionManager,
  responses: FauxResponseStep[],
  tools: (calls: Map<string, number>) => ToolDefinition[],
  extension?: ExtensionFactory,
): Promise<Scripted> {
  const faux = registerFauxProvider();
  faux.setResponses(responses);
  const dir = mkdtempSync(join(tmpdir(), "lb-pi-"));
  const authStorage = AuthStorage.inMemory();
  authStorage.setRuntimeApiKey(faux.getModel().provider, "not-a-key");
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
    authStorage,
    settingsManager,
    resourceLoader,
    model: faux.getModel(),
    sessionManager,
    customTools: defined,
    tools: defined.map((t) => t.name),
  });
  return { session, calls };
}
