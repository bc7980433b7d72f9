// --- The key of a tool call an agent framework makes (SEP-3182, the client side) ---
//
// The retries that execute a tool twice mostly come from the agent framework holding the MCP
// connection: its MCP client resends a tools/call whose answer was lost, its retry middleware
// runs the tool again, a resumed or replayed run executes the tool node again. None of them sends
// an idempotencyKey, and no framework's MCP client takes one through its API. What each does
// have is the model's tool-call id, the same on every retry of one call: the operation's identity.
//
// So the adapters (ai-sdk.ts, langchain.ts, mastra.ts) derive the key from the tool call where the
// framework runs the tool, and run the tool inside this file's context; the framework's own MCP
// client then sends the tools/call, and a wrapper of its fetch or transport (wire.ts) writes
// the key of the context into it. No framework is patched: each offers both hooks.

import { AsyncLocalStorage } from 'node:async_hooks';
import { hash } from 'node:crypto';
import { fingerprintToolCall } from '../core/fingerprint.js';

/** What tells one tool call from every other: the parts its key is derived from. */
export interface AgentToolCall {
  /**
   * The run or the thread (conversation) the call belongs to. Some providers number tool-call ids
   * per response (`call_0`, `call_1`), so an id alone repeats across runs.
   */
  thread: string;
  /**
   * Which of the model's responses in that thread issued the call (its id, or what the model saw
   * for it: agents/digest.ts), for the same reason: the next response may number its calls from
   * `call_0` again.
   */
  response: string;
  /** The tool, as the framework names it to the model. */
  tool: string;
  /** The model's tool-call id: the same on every retry the framework makes of this call. */
  toolCallId: string;
}

/** Marks the keys this module derives in the server's logs; the rest is a hash. */
const KEY_PREFIX = 'agent-';

/**
 * The call's idempotencyKey: the same for every execution of this tool call (a retry, a resumed
 * run, a replayed checkpoint), different for any other. A SHA-256 of the parts, so whatever the
 * provider's ids contain, the key keeps the guard's rules (1–255 characters, no control
 * characters): 49 characters of base64url.
 */
export function agentToolCallKey(call: AgentToolCall): string {
  const parts = JSON.stringify([
    'sep-3182 agent tool call',
    call.thread,
    call.response,
    call.tool,
    call.toolCallId,
  ]);
  return `${KEY_PREFIX}${hash('sha256', parts, 'base64url')}`;
}

/** One tool call of the model's, under way. */
interface KeyedExecution {
  idempotencyKey: string;
  /**
   * The tools/call the key belongs to: the first one sent while the tool runs, which is the
   * tool's own (the framework's MCP tool sends it before anything else can happen). A retry
   * sends the same name and equivalent arguments; anything else sent in this context (a call
   * made by a handler of the server's requests, a nested agent's) is another call.
   */
  owned?: { name: unknown; fingerprint: string };
  /** Whether a wire wrapper saw the owned tools/call: the proof that both hooks are in place. */
  seen: boolean;
}

const executions = new AsyncLocalStorage<KeyedExecution>();

/** What the adapters say, worded in one place. */
export const AgentKeyWarnings = {
  notAdvertised: (server: string) =>
    `The MCP server ${server} does not advertise capabilities.tools.idempotency: tool calls go to it without an idempotencyKey, as before, and a retry of one may execute it again.`,
  unseen: (tool: string) =>
    `The tools/call of ${tool} went out without passing fetchWithIdempotencyKeys or transportWithIdempotencyKeys, so it carried no idempotencyKey and a retry of it may execute it again: give the MCP client one of them.`,
  stepUnseen: (tool: string) =>
    `The tool call of ${tool} ran outside a step idempotencyKeyProcessor() saw (it is not among the agent's inputProcessors, the tool was given the agent under another name, or the run was resumed in a process that had not run that step), so it went without an idempotencyKey and a retry of it may execute it again.`,
} as const;

export type Warn = (message: string) => void;

/**
 * Runs one execution of the model's tool call with its key in context. `run` is the framework's
 * execution of an MCP tool; a tool of another kind (one that runs a sub-agent, say) must not run
 * here, or the first tools/call it causes would take its key.
 */
export async function runWithToolCallKey<T>(
  call: AgentToolCall,
  run: () => Promise<T>,
  warn: Warn,
): Promise<T> {
  const execution: KeyedExecution = { idempotencyKey: agentToolCallKey(call), seen: false };
  const result = await executions.run(execution, run);
  // Only an answered call says anything: one that failed may have failed before it was sent.
  if (!execution.seen) warn(AgentKeyWarnings.unseen(call.tool));
  return result;
}

/**
 * The key for a tools/call about to be sent, if it is the one the tool call under way owns (or
 * a retry of it); undefined for a call made outside any, or for another call made inside one.
 */
export function ownedIdempotencyKey(name: unknown, args: unknown): string | undefined {
  const execution = executions.getStore();
  if (!execution) return undefined;
  const fingerprinted = fingerprintToolCall(name, args);
  const fingerprint = fingerprinted.ok ? fingerprinted.fingerprint : undefined;
  if (fingerprint === undefined) return undefined;
  execution.owned ??= { name, fingerprint };
  if (execution.owned.name !== name || execution.owned.fingerprint !== fingerprint) return undefined;
  execution.seen = true;
  return execution.idempotencyKey;
}

/** A tool whose `execute` gets the framework's execution context second, as the AI SDK's and Mastra's do. */
export interface ExecutableTool<Context> {
  execute?(input: never, context: Context): unknown;
}

/**
 * A copy of `tools` whose every `execute` runs with the key of its tool call, the one `callOf`
 * tells from the execution context and the tool (none: the tool runs as before, unkeyed; a throw:
 * the tool call fails, unsent). For frameworks whose tools are plain objects; a tool without
 * `execute` is run by the application and sends nothing.
 */
export function withKeyedExecutions<TOOLS extends { [K in keyof TOOLS]: ExecutableTool<Context> }, Context>(
  tools: TOOLS,
  callOf: (tool: string, context: Context, definition: ExecutableTool<Context>) => AgentToolCall | undefined,
  onWarning?: Warn,
): TOOLS {
  const warn = onceEach(onWarning);
  const keyed = { ...tools };
  for (const name in tools) {
    if (Object.hasOwn(tools, name)) keyed[name] = withKeyedExecution(tools[name], name, callOf, warn);
  }
  return keyed;
}

function withKeyedExecution<T extends ExecutableTool<Context>, Context>(
  tool: T,
  name: string,
  callOf: (tool: string, context: Context, definition: ExecutableTool<Context>) => AgentToolCall | undefined,
  warn: Warn,
): T {
  const { execute } = tool;
  if (!execute) return tool;
  return Object.assign({}, tool, {
    // Async, so a call whose key cannot be derived (callOf throws) is a failed execution, as the
    // framework reports any other, and is never sent.
    execute: async (input: never, context: Context) => {
      const call = callOf(name, context, tool);
      const run = async () => execute.call(tool, input, context);
      return call === undefined ? run() : runWithToolCallKey(call, run, warn);
    },
  });
}

/**
 * `warn`, saying each message once: a warning here is about how the program is put together
 * (a server, a client), not about one call, and would otherwise repeat with every call.
 */
export function onceEach(warn: Warn = console.warn): Warn {
  const said = new Set<string>();
  return (message) => {
    if (said.has(message)) return;
    said.add(message);
    warn(message);
  };
}
