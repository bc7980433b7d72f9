// A Mastra agent (`@mastra/core` Agent, `@mastra/mcp` MCPClient) on the demo server's tools over
// Streamable HTTP, its model scripted with Mastra's own test model (MastraLanguageModelV2Mock,
// answers in the AI SDK v5 model spec): one charge of 100 (tool-call id `call_1`), then a
// sentence. With `keyed`, the tools and the server definition's fetch get
// mcp-request-idempotency/mastra; without, the framework is as it comes.
//
// Run on Node 24 by agent-process.ts: `tsx test/interop/support/mastra-agent.ts '<MastraRun as JSON>'`.
// Prints a MastraResult as one JSON line.

import { Agent } from '@mastra/core/agent';
import { MastraLanguageModelV2Mock } from '@mastra/core/test-utils/llm-mock';
import { MCPClient } from '@mastra/mcp';
import { fetchWithIdempotencyKeys, withIdempotencyKeys } from 'mcp-request-idempotency/mastra';

export interface MastraRun {
  url: string;
  keyed: boolean;
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

/** Its answer once the charge's result is in. */
const DONE_ANSWER: GenerateResult = {
  content: [{ type: 'text', text: 'Charged 100.' }],
  finishReason: 'stop',
  usage,
  warnings: [],
};

async function main({ url, keyed }: MastraRun): Promise<MastraResult> {
  const warnings: string[] = [];
  const onWarning = (w: string) => warnings.push(w);
  const fetch = keyed ? fetchWithIdempotencyKeys({ onWarning }) : undefined;
  const mcp = new MCPClient({ servers: { payments: { url: new URL(url), ...(fetch && { fetch }) } } });
  try {
    const mcpTools = await mcp.listTools();
    // A function, not the mock's array form: that one answers each call with the next entry's
    // answer (its index is read after the call is counted), so the first answer is never given.
    let calls = 0;
    const model = new MastraLanguageModelV2Mock({
      doGenerate: async () => (calls++ === 0 ? CHARGE_ANSWER : DONE_ANSWER),
    });
    const agent = new Agent({
      id: 'checkout',
      name: 'checkout',
      instructions: 'Charge what the user asks for.',
      model,
      tools: keyed ? withIdempotencyKeys(mcpTools, { onWarning }) : mcpTools,
    });
    const { text } = await agent.generate('Charge 100.');
    return { text, warnings };
  } finally {
    await mcp.disconnect();
  }
}

const run: MastraRun = JSON.parse(process.argv[2] ?? '{}');
console.log(JSON.stringify(await main(run)));
