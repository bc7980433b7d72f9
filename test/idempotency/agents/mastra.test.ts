// The Mastra adapter's key, without Mastra: the chain its agent loop runs (`@mastra/core` 1.71,
// read from its source) played by hand. Before each step's model call the input processors get the
// step (`processInputStep`: its number, its messages, its tools) and may give the step other tools;
// the step's tool calls then run those tools' `execute(input, { toolCallId, messages })`, which
// calls the Mastra tool's `execute(input, { runId, agent: { toolCallId, messages } })`, where
// `agent.messages` is the run's input, the same at every step. What is checked is the key on the
// wire: one per model response, the same on every execution of one call.

import fc from 'fast-check';
import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { idempotencyKeyProcessor, withIdempotencyKeys } from 'mcp-request-idempotency/mastra';
import { describe, expect, it } from 'vitest';
import { type AgentWire, agentWire } from '../../support/agent-wire.js';

/** MCPClient's name for the demo's charge: `<server>_<tool>`, also the tool's id. */
const CHARGE = 'payments_charge_guarded';

/** The run's input, as Mastra gives every step's tools `agent.messages`. */
const RUN_INPUT = [{ role: 'user', content: [{ type: 'text', text: 'Charge 100, then 100 again.' }] }];

interface Step {
  runId: string;
  stepNumber: number;
  systemMessages: unknown[];
  /** What the model is sent at the step, as Mastra stores it. */
  messages: unknown[];
}

type Execute = (input: unknown, options: { toolCallId: string; messages: unknown[] }) => Promise<unknown>;

/** An agent's tools, one MCP charge, set up as the docs say: wrapped, and the processor given. */
function agentOn(wire: AgentWire, { processor = true, name = CHARGE } = {}) {
  const warnings: string[] = [];
  const mcpTools = withIdempotencyKeys(
    {
      [CHARGE]: {
        id: CHARGE,
        execute: async (input: unknown, _context: { runId?: string; agent?: { toolCallId: string } }) =>
          wire.send('charge_guarded', input),
      },
    },
    { onWarning: (w) => warnings.push(w) },
  );
  const processors = processor ? [idempotencyKeyProcessor()] : [];
  /** Runs the model's step: the processors, then `execute` of each of the step's tool calls. */
  const step = (s: Step) => {
    // Mastra's conversion of a Mastra tool: its id kept, its execute given the agent's context.
    let tools: Record<string, unknown> = {
      [name]: {
        id: CHARGE,
        type: 'function',
        execute: (input: unknown, options: { toolCallId: string }) =>
          mcpTools[CHARGE]?.execute(input, {
            runId: s.runId,
            agent: { toolCallId: options.toolCallId },
          }),
      },
    };
    for (const p of processors) tools = p.processInputStep({ ...s, tools })?.tools ?? tools;
    return {
      call: (toolCallId: string) =>
        executeOf(tools[name])({ amount: 100 }, { toolCallId, messages: RUN_INPUT }),
    };
  };
  return { step, warnings };
}

function executeOf(tool: unknown): Execute {
  const execute: unknown =
    typeof tool === 'object' && tool !== null ? Reflect.get(tool, 'execute') : undefined;
  if (typeof execute !== 'function') throw new Error('the step has no such tool');
  return (input, options) => Promise.resolve(Reflect.apply(execute, tool, [input, options]));
}

// --- Two steps of one run, as the agent loop stores their messages ---

const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);
const userMessage = {
  id: 'msg-user',
  role: 'user',
  createdAt: at(0),
  threadId: 'thread-1',
  content: { format: 2, parts: [{ type: 'text', text: 'Charge 100, then 100 again.' }] },
};
const afterFirstCharge = {
  id: 'msg-response',
  role: 'assistant',
  createdAt: at(1),
  content: {
    format: 2,
    parts: [
      { type: 'step-start' },
      {
        type: 'tool-invocation',
        toolInvocation: {
          state: 'result',
          toolCallId: 'call_0',
          toolName: CHARGE,
          args: { amount: 100 },
          result: { charged: 100, balance: 100 },
        },
      },
    ],
  },
};
const first: Step = { runId: 'run-1', stepNumber: 0, systemMessages: [], messages: [userMessage] };
const second: Step = {
  runId: 'run-1',
  stepNumber: 1,
  systemMessages: [],
  messages: [userMessage, afterFirstCharge],
};

describe('a model that charges in one step and, having seen the result, again in the next, both calls call_0', () => {
  it('gets two keys: the second charge executes, it is not answered with the first’s result', async () => {
    const wire = agentWire();
    const { step, warnings } = agentOn(wire);
    await step(first).call('call_0');
    await step(second).call('call_0');
    const [one, two] = wire.keys();
    expect(checkIdempotencyKey(one)).toStrictEqual({ ok: true, key: one });
    expect(two).not.toBe(one);
    expect(warnings).toStrictEqual([]);
  });

  it('keeps one key for every execution of one step’s call (a resend, an approval resumed in process)', async () => {
    const wire = agentWire();
    const { step } = agentOn(wire);
    const firstStep = step(first);
    await firstStep.call('call_0');
    await firstStep.call('call_0');
    // The same step met again (its messages read back from storage, new objects): the same key.
    await step(structuredClone(first)).call('call_0');
    expect(new Set(wire.keys()).size).toBe(1);
    expect(wire.keys()).toHaveLength(3);
  });

  it('without the processor, sends no key, and says once what to add', async () => {
    const wire = agentWire();
    const { step, warnings } = agentOn(wire, { processor: false });
    await step(first).call('call_0');
    await step(second).call('call_0');
    expect(wire.keys()).toStrictEqual([undefined, undefined]);
    expect(warnings).toStrictEqual([
      `The tool call of ${CHARGE} ran outside a step idempotencyKeyProcessor() saw (it is not among the agent's inputProcessors, the tool was given the agent under another name, or the run was resumed in a process that had not run that step), so it went without an idempotencyKey and a retry of it may execute it again.`,
    ]);
  });

  it('keys a tool the agent was given under another name, by its id', async () => {
    const wire = agentWire();
    const { step, warnings } = agentOn(wire, { name: 'charge' });
    await step(first).call('call_0');
    await step(second).call('call_0');
    expect(new Set(wire.keys()).size).toBe(2);
    expect(warnings).toStrictEqual([]);
  });

  it('sends no key for a call made inside another tool’s execution (a sub-agent without the processor)', async () => {
    const wire = agentWire();
    // The step's tool is the sub-agent; inside it, the sub-agent's own loop runs the charge directly.
    const mcpTools = withIdempotencyKeys(
      {
        [CHARGE]: {
          id: CHARGE,
          execute: async (input: unknown, _c: { runId?: string; agent?: { toolCallId: string } }) =>
            wire.send('charge_guarded', input),
        },
      },
      { onWarning: () => {} },
    );
    const subAgent = {
      id: 'agent-billing',
      execute: async (_input: unknown, options: { toolCallId: string }) =>
        mcpTools[CHARGE]?.execute(
          { amount: 100 },
          { runId: 'sub-run', agent: { toolCallId: options.toolCallId } },
        ),
    };
    const tools = idempotencyKeyProcessor().processInputStep({
      ...first,
      tools: { 'agent-billing': subAgent },
    })?.tools;
    await executeOf(tools?.['agent-billing'])(
      { prompt: 'bill' },
      { toolCallId: 'call_0', messages: RUN_INPUT },
    );
    expect(wire.keys()).toStrictEqual([undefined]);
  });
});

// --- Any steps: the property ---
//
// Steps drawn from small domains, so two are often equal and often differ in one place: the run,
// the step's number, its system messages, its messages (Mastra's stored form: ids, Dates, parts,
// tool results, provider metadata, files as strings or bytes in three types).

type Binary = { text: string } | { bytes: number[] };

const small = <T>(...values: T[]) => fc.constantFrom(...values);
const binary: fc.Arbitrary<Binary> = fc.oneof(
  fc.record({
    text: small('JVBERi0=', 'data:application/pdf;base64,JVBERi0=', 'https://files.example/a.pdf'),
  }),
  fc.record({ bytes: fc.array(small(0, 1, 0xff), { maxLength: 2 }) }),
);
const part = fc.oneof(
  fc.record({ type: fc.constant('text'), text: small('Charge 100.', 'Charge 200.', '') }),
  fc.record({ type: fc.constant('file'), data: binary, mimeType: small('application/pdf', 'image/png') }),
  fc.record({ type: fc.constant('step-start') }),
  fc.record({
    type: fc.constant('tool-invocation'),
    toolInvocation: fc.record({
      state: fc.constant('result'),
      toolCallId: small('call_0', 'call_1'),
      toolName: small(CHARGE),
      args: fc.record({ amount: small(100, 200) }),
      result: fc.record({ balance: small(100, 200) }),
    }),
  }),
);
const storedMessage = fc.record(
  {
    id: small('msg-1', 'msg-2'),
    role: small('user', 'assistant'),
    createdAt: small(0, 1000),
    content: fc.record(
      {
        format: fc.constant(2),
        parts: fc.array(part, { maxLength: 2 }),
        providerMetadata: small({ openai: { itemId: 'a' } }, { openai: { itemId: 'b' } }),
      },
      { requiredKeys: ['format', 'parts'] },
    ),
  },
  { requiredKeys: ['id', 'role', 'createdAt', 'content'] },
);
type StoredMessage = typeof storedMessage extends fc.Arbitrary<infer T> ? T : never;
interface AbstractStep {
  runId: string;
  stepNumber: number;
  systemMessages: { role: string; content: string }[];
  messages: StoredMessage[];
}
const abstractStep: fc.Arbitrary<AbstractStep> = fc.record({
  runId: small('run-1', 'run-2'),
  stepNumber: small(0, 1),
  systemMessages: fc.array(
    fc.record({ role: fc.constant('system'), content: small('You charge.', 'You refund.') }),
    {
      maxLength: 1,
    },
  ),
  messages: fc.array(storedMessage, { minLength: 1, maxLength: 2 }),
});

/** The step as Mastra would hand it over: Dates made, bytes in one of three types, objects new. */
function rendered(s: AbstractStep, form: number): Step {
  const bytesIn = (bytes: number[]) =>
    [() => Uint8Array.from(bytes), () => Buffer.from(bytes), () => Uint8Array.from(bytes).buffer][
      form % 3
    ]?.();
  const value = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(value);
    if (typeof v !== 'object' || v === null) return v;
    if ('bytes' in v && Array.isArray(v.bytes)) return bytesIn(v.bytes);
    if ('text' in v && Object.keys(v).length === 1) return v.text;
    // Members in another order each time: the order is not what the model saw.
    const entries = Object.entries(v).map(([k, m]) => [k, k === 'createdAt' ? at(Number(m)) : value(m)]);
    return Object.fromEntries(form % 2 === 0 ? entries : entries.reverse());
  };
  return {
    ...s,
    systemMessages: structuredClone(s.systemMessages),
    messages: value(s.messages) as unknown[],
  };
}

describe('the Mastra key, over any two steps', () => {
  it('is one key for one step’s call however it is handed over, and two for any other step or call', async () => {
    await fc.assert(
      fc.asyncProperty(
        abstractStep,
        small('call_0', 'call_1'),
        abstractStep,
        small('call_0', 'call_1'),
        fc.nat(),
        fc.nat(),
        async (s1, id1, s2, id2, form1, form2) => {
          const wire = agentWire();
          const { step, warnings } = agentOn(wire);
          await step(rendered(s1, form1)).call(id1);
          await step(rendered(s1, form2)).call(id1);
          await step(rendered(s2, form2)).call(id2);
          const [key, again, other] = wire.keys();
          expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
          expect(again).toBe(key);
          const same = JSON.stringify([s1, id1]) === JSON.stringify([s2, id2]);
          expect(other === key).toBe(same);
          expect(warnings).toStrictEqual([]);
        },
      ),
      { numRuns: 1_000 },
    );
  });
});
