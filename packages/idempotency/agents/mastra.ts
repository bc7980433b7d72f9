// --- Mastra (`@mastra/core`, `@mastra/mcp`): one idempotencyKey per tool call, on every retry ---
//
// Where Mastra repeats a tool call: its MCPClient, when a tools/call fails on a dropped or refused
// connection, reconnects and sends the same call again, inside the tool's one execution, possibly
// after the server ran it. It sends `{ name, arguments }` (and `_meta`) only.
//
// The hooks it offers: the tools `listTools()` returns, whose `execute` gets the run's id and the
// agent's tool-call id (`withIdempotencyKeys` runs it with the call's key), and the `fetch` of an
// HTTP server's definition (`fetchWithIdempotencyKeys`). Over stdio MCPClient makes its transport
// itself from `command` and takes none: there the calls go without a key. Nothing here imports Mastra.

import { type AgentToolCall, type ExecutableTool, type Warn, withKeyedExecutions } from './call.js';

export { fetchWithIdempotencyKeys, type WireOptions } from './wire.js';

/** What Mastra gives a tool's `execute` when an agent runs it, as far as the key needs it. */
interface ExecutionContext {
  /** The agent run: the same when a suspended run is resumed. */
  runId?: string;
  agent?: {
    toolCallId: string;
    /** What was sent to the model for the response that issued the call: its position is their count. */
    messages: readonly unknown[];
  };
}

export interface MastraKeyOptions {
  /** Told once if a tool call went out without a key (no wrapped fetch saw it). */
  onWarning?: Warn;
}

/**
 * The MCP tools (what `mcpClient.listTools()` returned), each `execute` run with its tool call's
 * key when an agent runs it: derived from the run's id, the position of the model's response, the
 * tool's name and the agent's `toolCallId`. Run outside an agent (no tool-call id), a tool is
 * called as before. Give the server's definition `fetch: fetchWithIdempotencyKeys()` too: only
 * then does the key reach the server.
 */
export function withIdempotencyKeys<TOOLS extends { [K in keyof TOOLS]: ExecutableTool<ExecutionContext> }>(
  tools: TOOLS,
  { onWarning }: MastraKeyOptions = {},
): TOOLS {
  return withKeyedExecutions(
    tools,
    (tool, { runId, agent }: ExecutionContext): AgentToolCall | undefined =>
      runId === undefined || agent === undefined
        ? undefined
        : { thread: runId, response: String(agent.messages.length), tool, toolCallId: agent.toolCallId },
    onWarning,
  );
}
