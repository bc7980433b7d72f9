// --- Vercel AI SDK (`ai`, `@ai-sdk/mcp`): one idempotencyKey per tool call, on every retry ---
//
// Where the AI SDK repeats a tool call: its MCP client (`createMCPClient({ maxRetries })`) sends
// a tools/call again when the last attempt failed with HTTP 408, 409, 429 or 5xx or a reset
// connection, inside the tool's one execution, possibly after the server ran it. It sends
// `{ name, arguments }` only, and the MCP tool's `execute` drops the `toolCallId` the SDK gives it.
//
// The hooks it offers: the tools are plain objects (`withIdempotencyKeys` runs each `execute` with
// the key of its tool call), and the MCP client takes a `fetch` in its HTTP transport options or
// any transport object (the wire wrappers write the key in). Nothing here imports the AI SDK.

import { type AgentToolCall, type ExecutableTool, type Warn, withKeyedExecutions } from './call.js';
import { digestOfModelInput } from './digest.js';

export { UndigestibleMessageError } from './digest.js';
export { fetchWithIdempotencyKeys, transportWithIdempotencyKeys, type WireOptions } from './wire.js';

/** What the AI SDK gives a tool's `execute`, as far as the key needs it. */
interface ExecutionOptions {
  toolCallId: string;
  /** What was sent to the model for the response that issued the call (the prompt, the history). */
  messages: readonly unknown[];
}

export interface AiSdkKeyOptions {
  /**
   * The conversation these tool calls belong to, and where you decide what a conversation sent
   * again does: the chat's id and the id of the user message the turn answers
   * (`${chatId}:${message.id}`), the same wherever the turn's tool calls may run again (a retried
   * request, a resumed approval); or a new UUID for each run that has none. Never one value for
   * unrelated runs: providers that number their tool-call ids (`call_0`, …) would give two of them
   * one key, and the second call would get the first's answer.
   *
   * A turn sent again replays only with a provider whose tool-call ids are deterministic: with random
   * ones (most hosted APIs), the model's new response has new ids, so new keys, and its calls
   * execute again, whatever this is. Answer a retried request from the turn's stored result instead.
   */
  thread: string;
  /** Told once if a tool call went out without a key (no wrapped fetch or transport saw it). */
  onWarning?: Warn;
}

/**
 * The MCP tools, each `execute` run with its tool call's key: derived from `thread`, what was
 * sent to the model for the response that issued the call, the tool's name and the `toolCallId`.
 * Wrap what `mcpClient.tools()` returned, and give that client `fetchWithIdempotencyKeys()` (or
 * wrap its transport): only then does the key reach the server. Tools of other kinds are not for this:
 * only a call of an MCP tool has a tools/call to key.
 */
export function withIdempotencyKeys<TOOLS extends { [K in keyof TOOLS]: ExecutableTool<ExecutionOptions> }>(
  tools: TOOLS,
  { thread, onWarning }: AiSdkKeyOptions,
): TOOLS {
  return withKeyedExecutions(
    tools,
    (tool, options: ExecutionOptions): AgentToolCall => ({
      thread,
      response: responseOf(options.messages),
      tool,
      toolCallId: options.toolCallId,
    }),
    onWarning,
  );
}

/**
 * The model's response, told apart by what was sent to it: the AI SDK gives the tool no id of the
 * response. Their count alone is not enough: each `generateText({ prompt })` sends one message, so
 * two turns of one chat would share a key and the second charge would replay the first's answer.
 * The digest (digest.ts) is the same when the same turn is sent again, whatever form its attached
 * files took (bytes, base64, a data URL), and differs with anything else the model was sent; it
 * throws, and the call is not made, for a value it cannot write, rather than fall back to a digest
 * two turns could share.
 */
function responseOf(messages: readonly unknown[]): string {
  return digestOfModelInput(messages);
}
