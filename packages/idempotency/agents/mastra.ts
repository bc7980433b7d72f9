// --- Mastra (`@mastra/core`, `@mastra/mcp`): one idempotencyKey per tool call, on every retry ---
//
// Where Mastra repeats a tool call: its MCPClient, when a tools/call fails on a dropped or refused
// connection, reconnects and sends the same call again, inside the tool's one execution, possibly
// after the server ran it. It sends `{ name, arguments }` (and `_meta`) only.
//
// What Mastra tells a tool's `execute` (`@mastra/core` 1.71, CoreToolBuilder): the run's id
// (`runId`), the agent's tool-call id (`agent.toolCallId`) and `agent.messages`, which is the run's
// input, the same at every step: not what the model saw when it issued the call. A model that
// charges in one step and, having seen the result, again in the next, both calls numbered `call_0`,
// would give two calls one key, and the second charge would be answered with the first's result.
// What the model saw at a step is given to the agent's input processors, before that step's model
// call (`processInputStep`: the step's number and its messages), with the step's tools to replace.
//
// So the adapter has two parts and a wire: `idempotencyKeyProcessor()` gives each step's tools the
// step (its number and a digest of its messages, digest.ts), `withIdempotencyKeys` runs each MCP
// tool's execution with the key of its tool call (the run, that step, the tool, the tool-call id),
// and `fetchWithIdempotencyKeys` writes the key into the tools/call. Over stdio MCPClient makes its
// transport itself from `command` and takes none: there the calls go without a key. Nothing here
// imports Mastra: the processor is the plain object Mastra's `Processor` type describes.

import { AsyncLocalStorage } from 'node:async_hooks';
import { field } from '../core/capability.js';
import {
  AgentKeyWarnings,
  type AgentToolCall,
  type ExecutableTool,
  onceEach,
  type Warn,
  withKeyedExecutions,
} from './call.js';
import { digestOfModelInput } from './digest.js';

export { UndigestibleMessageError } from './digest.js';
export { fetchWithIdempotencyKeys, type WireOptions } from './wire.js';

/** What Mastra gives a tool's `execute` when an agent runs it, as far as the key needs it. */
interface ExecutionContext {
  /** The agent run: the same when a suspended run is resumed. */
  runId?: string;
  agent?: { toolCallId: string };
}

/** The model's response a tool call came from: the step it was made at, as the processor saw it. */
interface Step {
  /** The step's number and the digest of what the model was sent at it. */
  response: string;
  /** The tool call this execution is of, as the step's tool was given it. */
  toolCallId: unknown;
  /** The tool's name, as the model calls it, and its id (Mastra's, where the tool has one). */
  tool: string;
  id: unknown;
}

/** The step of the tool execution under way: set by the processor's wrapper of each step's tools. */
const steps = new AsyncLocalStorage<Step>();

export interface MastraKeyOptions {
  /**
   * Told once if a tool call went out without a key: no wrapped fetch saw it, or it ran outside a
   * step `idempotencyKeyProcessor()` saw (see `AgentKeyWarnings.stepUnseen`).
   */
  onWarning?: Warn;
}

/**
 * The MCP tools (what `mcpClient.listTools()` returned), each `execute` run with its tool call's
 * key when an agent runs it: derived from the run's id, the model's response that issued the call
 * (the step `idempotencyKeyProcessor()` gave it), the tool's name and the agent's `toolCallId`.
 * Run outside an agent (no tool-call id), a tool is called as before. Give the agent
 * `inputProcessors: [idempotencyKeyProcessor()]`, and the server's definition
 * `fetch: fetchWithIdempotencyKeys()`: only then does the key reach the server.
 */
export function withIdempotencyKeys<TOOLS extends { [K in keyof TOOLS]: ExecutableTool<ExecutionContext> }>(
  tools: TOOLS,
  { onWarning }: MastraKeyOptions = {},
): TOOLS {
  const warn = onceEach(onWarning);
  return withKeyedExecutions(
    tools,
    (name, { runId, agent }: ExecutionContext, tool): AgentToolCall | undefined => {
      if (runId === undefined || agent === undefined) return undefined;
      const step = steps.getStore();
      // Only the step's own execution of this tool and call: not a call a sub-agent without the
      // processor makes while another tool (the one running it) executes.
      const id = field(tool, 'id');
      const own =
        step?.toolCallId === agent.toolCallId && (id === undefined ? step.tool === name : step.id === id);
      if (step === undefined || !own) {
        // No step, no key: a key without it could be another response's call, and replay its answer.
        warn(AgentKeyWarnings.stepUnseen(name));
        return undefined;
      }
      return { thread: runId, response: step.response, tool: step.tool, toolCallId: agent.toolCallId };
    },
    warn,
  );
}

/** What Mastra gives `processInputStep`, as far as the step needs it. */
interface InputStepArgs {
  stepNumber: number;
  /** The messages the model is sent at this step (Mastra's stored form: ids, parts, tool results). */
  messages: readonly unknown[];
  /** The system messages it is sent with them. */
  systemMessages?: readonly unknown[];
  /** The step's tools, as Mastra runs them: `execute(input, { toolCallId, … })`. */
  tools?: Record<string, unknown>;
}

/**
 * An input processor for the agent (`inputProcessors: [idempotencyKeyProcessor()]`): before each
 * step's model call it reads what the model is sent at that step, and gives the step tools that run
 * with it, so `withIdempotencyKeys` can key a tool call by the model's response that issued it.
 * Two responses of one run are two steps, with two keys, even when the provider numbers both
 * responses' calls from `call_0`; the retries of one call, within its execution, share its key.
 */
export function idempotencyKeyProcessor() {
  return {
    id: 'idempotency-keys',
    name: 'Idempotency keys',
    processInputStep: ({ stepNumber, messages, systemMessages = [], tools }: InputStepArgs) => {
      if (tools === undefined) return undefined;
      // The step's number too: a processor that drops earlier tool calls from what the model is
      // sent (a filter of history) could otherwise make two steps' messages one.
      const response = `${stepNumber}:${digestOfModelInput([...systemMessages, ...messages])}`;
      const stepTools: Record<string, unknown> = {};
      for (const [name, tool] of Object.entries(tools)) stepTools[name] = inStep(tool, name, response);
      return { tools: stepTools };
    },
  };
}

/** `tool`, its executions run within the step `response`. */
function inStep(tool: unknown, name: string, response: string): unknown {
  const execute = field(tool, 'execute');
  if (typeof tool !== 'object' || tool === null || typeof execute !== 'function') return tool;
  return {
    ...tool,
    execute: (input: unknown, options: unknown, ...rest: unknown[]) =>
      steps.run(
        { response, toolCallId: field(options, 'toolCallId'), tool: name, id: field(tool, 'id') },
        () => Reflect.apply(execute, tool, [input, options, ...rest]),
      ),
  };
}
