// --- LangChain.js / LangGraph.js (`langchain` 1, `@langchain/mcp-adapters`): one key per tool call ---
//
// Where a LangChain agent repeats a tool call: `toolRetryMiddleware` runs the tool again after
// any error (twice, by default) with the same tool call; a run interrupted after the tool ran
// runs the whole tools node again when it is resumed; a run replayed from a checkpoint taken
// before the tools node runs it again. Each time the MCP adapters send `{ name, arguments }`
// (`beforeToolCall` can change only the arguments or the headers), and the model's tool call,
// with its id, is the same.
//
// The hooks it offers: a middleware around each tool call (`idempotencyKeyMiddleware`, which runs
// the call of an MCP tool with its key), and the MCP client the adapters are given
// (`loadMcpTools(name, client)`), whose transport or fetch the wire wrappers wrap. Nothing here
// imports LangChain: the middleware is the plain object `createMiddleware` would return.

import { field } from '../core/capability.js';
import { type AgentToolCall, onceEach, runWithToolCallKey, type Warn } from './call.js';

export { fetchWithIdempotencyKeys, transportWithIdempotencyKeys, type WireOptions } from './wire.js';

export interface LangChainKeyOptions {
  /**
   * The MCP tools (what `loadMcpTools` returned): only their calls are keyed. A tool of another
   * kind, one that runs a sub-agent say, must not be, or its key would go to the first tools/call
   * made while it runs.
   */
  tools: ReadonlyArray<{ name: string }>;
  /** Told once if a tool call went out without a key (no wrapped fetch or transport saw it). */
  onWarning?: Warn;
}

/** What LangChain gives `wrapToolCall`, as far as the key needs it. */
interface ToolCallRequest {
  toolCall: { name: string; id?: string | undefined };
  state: { messages: readonly unknown[] };
  runtime: { configurable?: { thread_id?: string | undefined } | undefined };
}

/**
 * LangChain's mark of a middleware, as `createMiddleware` sets it: a registered symbol, so every
 * copy of `langchain` reads the same one.
 */
const MIDDLEWARE_BRAND = Symbol.for('AgentMiddleware');

/**
 * Keys every call of the MCP `tools`: the key is derived from the thread (`thread_id`, if the run
 * has one), the id of the model's response that issued the call, the tool's name and the tool
 * call's id. The same on each retry, resume and replay of that call; a call the model issues again
 * is a new one, with a new id and so a new key. Put it anywhere among the middleware: inside or
 * outside `toolRetryMiddleware`, every attempt carries the one key.
 */
export function idempotencyKeyMiddleware({ tools, onWarning }: LangChainKeyOptions) {
  const mcpTools = new Set(tools.map((tool) => tool.name));
  const warn = onceEach(onWarning);
  return {
    [MIDDLEWARE_BRAND]: true,
    name: 'IdempotencyKeyMiddleware',
    wrapToolCall: <Request extends ToolCallRequest, Result>(
      request: Request,
      handler: (request: Request) => Result | Promise<Result>,
    ): Promise<Result> => {
      const { toolCall } = request;
      if (!mcpTools.has(toolCall.name) || toolCall.id === undefined) return Promise.resolve(handler(request));
      const call: AgentToolCall = {
        thread: request.runtime.configurable?.thread_id ?? '',
        response: responseIssuing(request.state.messages, toolCall.id),
        tool: toolCall.name,
        toolCallId: toolCall.id,
      };
      return runWithToolCallKey(call, async () => handler(request), warn);
    },
  };
}

/**
 * The id of the model's message that carries the tool call: the provider's, or the `run-<uuid>`
 * LangChain gives a message that has none. It is in the state, so a resumed or replayed run reads
 * the same one. (Its position, should it have no id.)
 */
function responseIssuing(messages: readonly unknown[], toolCallId: string): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const toolCalls = field(messages[i], 'tool_calls');
    if (!Array.isArray(toolCalls) || !toolCalls.some((c) => field(c, 'id') === toolCallId)) continue;
    const id = field(messages[i], 'id');
    return typeof id === 'string' ? id : `#${i}`;
  }
  return '';
}
