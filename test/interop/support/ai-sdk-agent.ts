// The Vercel AI SDK's agent loop (`generateText` with tools; `ai` 7, `@ai-sdk/mcp` 2) on the demo
// server's tools, its model scripted with the SDK's own MockLanguageModelV4: one `charge_guarded`
// of 100 (tool-call id `call_1`), then a sentence. The MCP client retries a failed tools/call
// twice (`maxRetries: 2`). With `keyed`, the tools and the client's fetch or transport get
// mcp-request-idempotency/ai-sdk; without, the framework is as it comes. With `invoices`, each
// run's one message is the same sentence with an invoice attached, read as `blob.arrayBuffer()`
// reads it: the turns differ only in their attachment.
//
// Run on Node 24 by agent-process.ts: `tsx test/interop/support/ai-sdk-agent.ts '<AiSdkRun as JSON>'`.
// Prints an AiSdkResult as one JSON line.

import { join } from 'node:path';
import { createMCPClient, type MCPTransport } from '@ai-sdk/mcp';
import { Experimental_StdioMCPTransport } from '@ai-sdk/mcp/mcp-stdio';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import {
  fetchWithIdempotencyKeys,
  transportWithIdempotencyKeys,
  withIdempotencyKeys,
} from 'mcp-request-idempotency/ai-sdk';
import { ROOT } from '../../../demo/processes/launch.js';

export interface AiSdkRun {
  /** An HTTP endpoint, or server.ts spawned over stdio. */
  endpoint: { url: string } | { stdio: true };
  keyed: boolean;
  /** The conversation's id, for the adapter's key. */
  thread: string;
  /** How many times the same turn is run (a conversation sent again). */
  runs: number;
  /** The text of each run's attached invoice (a file part whose data is an ArrayBuffer), if any. */
  invoices?: string[];
}

export interface AiSdkResult {
  /** What the charge answered the model, each run: its text, or the error. */
  answers: string[];
  warnings: string[];
  /** Over stdio: the key of each tools/call of the charge, as sent. */
  sentKeys: unknown[];
  /** Over stdio: the ledger's balance at the end. */
  balance?: number;
}

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** The scripted model: the charge, then a sentence once its result is in. */
function scriptedModel(): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    doGenerate: [
      {
        content: [
          { type: 'tool-call', toolCallId: 'call_1', toolName: 'charge_guarded', input: '{"amount":100}' },
        ],
        finishReason: { unified: 'tool-calls', raw: undefined },
        usage,
        warnings: [],
      },
      {
        content: [{ type: 'text', text: 'Charged 100.' }],
        finishReason: { unified: 'stop', raw: undefined },
        usage,
        warnings: [],
      },
    ],
  });
}

async function main(run: AiSdkRun): Promise<AiSdkResult> {
  const warnings: string[] = [];
  const onWarning = (w: string) => warnings.push(w);
  const sentKeys: unknown[] = [];
  let transport: MCPTransport | { type: 'http'; url: string; fetch?: typeof fetch };
  if ('url' in run.endpoint) {
    const fetch = run.keyed ? fetchWithIdempotencyKeys({ onWarning }) : undefined;
    transport = { type: 'http', url: run.endpoint.url, ...(fetch && { fetch }) };
  } else {
    const stdio = new Experimental_StdioMCPTransport({
      command: process.execPath,
      args: ['--import', 'tsx', join(ROOT, 'server.ts')],
      cwd: ROOT,
      stderr: 'ignore',
    });
    // Reads the wire under the adapter's wrapper: what reaches the server.
    const send = stdio.send.bind(stdio);
    stdio.send = (message) => {
      if (
        'method' in message &&
        message.method === 'tools/call' &&
        message.params?.name === 'charge_guarded'
      ) {
        sentKeys.push(message.params.idempotencyKey);
      }
      return send(message);
    };
    transport = run.keyed ? transportWithIdempotencyKeys(stdio, { onWarning }) : stdio;
  }
  const mcp = await createMCPClient({ transport, maxRetries: 2 });
  try {
    const mcpTools = await mcp.tools();
    const tools = run.keyed ? withIdempotencyKeys(mcpTools, { thread: run.thread, onWarning }) : mcpTools;
    const answers: string[] = [];
    for (let i = 0; i < run.runs; i++) {
      const invoice = run.invoices?.[i];
      const { steps } = await generateText({
        model: scriptedModel(),
        tools,
        stopWhen: stepCountIs(3),
        ...(invoice === undefined
          ? { prompt: 'Charge 100.' }
          : {
              messages: [
                {
                  role: 'user' as const,
                  content: [
                    { type: 'text' as const, text: 'Charge the invoice attached.' },
                    {
                      type: 'file' as const,
                      mediaType: 'text/plain',
                      data: await new Blob([invoice]).arrayBuffer(),
                    },
                  ],
                },
              ],
            }),
      });
      for (const part of steps.flatMap((step) => step.content)) {
        if (part.type === 'tool-result') answers.push(JSON.stringify(part.output));
        if (part.type === 'tool-error') answers.push(`error: ${String(part.error)}`);
      }
    }
    if (!('stdio' in run.endpoint)) return { answers, warnings, sentKeys };
    const { structuredContent } = await mcp.callTool({ name: 'get_balance', arguments: {} });
    const balance: unknown = Reflect.get(Object(structuredContent), 'balance');
    return { answers, warnings, sentKeys, balance: typeof balance === 'number' ? balance : undefined };
  } finally {
    await mcp.close();
  }
}

const run: AiSdkRun = JSON.parse(process.argv[2] ?? '{}');
console.log(JSON.stringify(await main(run)));
