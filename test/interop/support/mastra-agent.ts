// A Mastra agent (`@mastra/core` Agent, `@mastra/mcp` MCPClient) on the demo server's tools over
// Streamable HTTP, its model scripted with Mastra's own test model (MastraLanguageModelV2Mock,
// answers in the AI SDK v5 model spec): one charge of 100 (tool-call id `call_1`), then a
// sentence; or, with `chargesInTwoSteps`, a charge of 100 in its first response and, having seen
// its result, another in its second, both numbered `call_0` as some providers number them. With
// `approved`, the charge waits for approval (`requireToolApproval`), given by this agent or by
// another, as another instance sharing the run's storage would give it. With
// `keyed`, the tools, the agent's input processors and the server definition's fetch get
// mcp-request-idempotency/mastra; without, the framework is as it comes.
//
// Run on Node 24 by agent-process.ts: `tsx test/interop/support/mastra-agent.ts '<MastraRun as JSON>'`.
// Prints a MastraResult as one JSON line.

import { Agent } from '@mastra/core/agent';
import { Mastra } from '@mastra/core/mastra';
import { InMemoryStore } from '@mastra/core/storage';
import { MastraLanguageModelV2Mock } from '@mastra/core/test-utils/llm-mock';
import { MCPClient } from '@mastra/mcp';
import {
  fetchWithIdempotencyKeys,
  idempotencyKeyProcessor,
  withIdempotencyKeys,
} from 'mcp-request-idempotency/mastra';

export interface MastraRun {
  url: string;
  keyed: boolean;
  /** The model charges in its first response and again in its second, both calls `call_0`. */
  chargesInTwoSteps?: boolean;
  /** The charge waits for approval, given by the agent that suspended the run or by another. */
  approved?: 'here' | 'elsewhere';
}

export interface MastraResult {
  /** What the agent said at the end. */
  text: string;
  warnings: string[];
}

/** MCPClient names a server's tools `<server>_<tool>`. */
const CHARGE = 'payments_charge_guarded';

/** What the mock's model answers a call with (the AI SDK v5 model spec): an entry of its script. */
type GenerateResult = Extract<
  ConstructorParameters<typeof MastraLanguageModelV2Mock>[0]['doGenerate'],
  unknown[]
>[number];

const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

/** The scripted model's first answer: the charge. */
const CHARGE_ANSWER: GenerateResult = {
  content: [{ type: 'tool-call', toolCallId: 'call_1', toolName: CHARGE, input: '{"amount":100}' }],
  finishReason: 'tool-calls',
  usage,
  warnings: [],
};

/** A charge numbered as a provider that numbers its calls per response numbers the first. */
const CHARGE_CALL_0: GenerateResult = {
  content: [{ type: 'tool-call', toolCallId: 'call_0', toolName: CHARGE, input: '{"amount":100}' }],
  finishReason: 'tool-calls',
  usage,
  warnings: [],
};

/** Its answer once the charge's result is in. */
const DONE_ANSWER: GenerateResult = {
  content: [{ type: 'text', text: 'Charged 100.' }],
  finishReason: 'stop',
  usage,
  warnings: [],
};

/** The model's answers, in order: the last one is given to every later call. */
const script = (chargesInTwoSteps: boolean): GenerateResult[] =>
  chargesInTwoSteps ? [CHARGE_CALL_0, CHARGE_CALL_0, DONE_ANSWER] : [CHARGE_ANSWER, DONE_ANSWER];

async function main({ url, keyed, chargesInTwoSteps = false, approved }: MastraRun): Promise<MastraResult> {
  const warnings: string[] = [];
  const onWarning = (w: string) => warnings.push(w);
  const fetch = keyed ? fetchWithIdempotencyKeys({ onWarning }) : undefined;
  const mcp = new MCPClient({ servers: { payments: { url: new URL(url), ...(fetch && { fetch }) } } });
  try {
    const mcpTools = await mcp.listTools();
    // A function, not the mock's array form: that one answers each call with the next entry's
    // answer (its index is read after the call is counted), so the first answer is never given.
    const answers = script(chargesInTwoSteps);
    let calls = 0;
    const model = new MastraLanguageModelV2Mock({
      doGenerate: async () => answers[Math.min(calls++, answers.length - 1)] ?? DONE_ANSWER,
    });
    const agentOf = () =>
      new Agent({
        id: 'checkout',
        name: 'checkout',
        instructions: 'Charge what the user asks for.',
        model,
        tools: keyed ? withIdempotencyKeys(mcpTools, { onWarning }) : mcpTools,
        ...(keyed && { inputProcessors: [idempotencyKeyProcessor()] }),
      });
    if (approved === undefined) {
      const { text } = await agentOf().generate('Charge 100.');
      return { text, warnings };
    }
    // A suspended run waits in storage; the agent that approves it finds it there.
    const storage = new InMemoryStore();
    const agent = new Mastra({ agents: { checkout: agentOf() }, storage }).getAgent('checkout');
    const suspended = await agent.generate('Charge 100.', { requireToolApproval: true });
    const approver =
      approved === 'here'
        ? agent
        : new Mastra({ agents: { checkout: agentOf() }, storage }).getAgent('checkout');
    const { text } = await approver.approveToolCallGenerate({
      runId: suspended.runId ?? '',
      toolCallId: 'call_1',
    });
    return { text, warnings };
  } finally {
    await mcp.disconnect();
  }
}

const run: MastraRun = JSON.parse(process.argv[2] ?? '{}');
console.log(JSON.stringify(await main(run)));
