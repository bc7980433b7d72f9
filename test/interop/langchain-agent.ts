// --- A LangChain agent on the demo server's tools, driven by a scripted model ---
//
// The agent a LangChain user builds: `createAgent` with the MCP tools `@langchain/mcp-adapters`
// loads from an MCP client, the middleware the caller chooses, and LangChain's own fake chat model
// in place of a provider: it asks for one `charge_guarded` of 100, then says it is done. With
// `keyed`, the agent gets what mcp-request-idempotency/langchain adds (the middleware, and the
// fetch or transport wrapper); without, it is the framework as it comes. The demo and the tests
// both build their agents here.

import { join } from 'node:path';
import { fakeModel } from '@langchain/core/testing';
import type { BaseCheckpointSaver } from '@langchain/langgraph';
import { loadMcpTools } from '@langchain/mcp-adapters';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type AgentMiddleware, AIMessage, createAgent } from 'langchain';
import {
  fetchWithIdempotencyKeys,
  idempotencyKeyMiddleware,
  transportWithIdempotencyKeys,
} from 'mcp-request-idempotency/langchain';
import { ROOT } from '../../demo/processes/launch.js';

/** The model's one tool call: its id is the model's, the same on every retry of the call. */
export const CHARGE_CALL = { name: 'charge_guarded', args: { amount: 100 }, id: 'call_1' };

/** Where the agent's MCP client connects: an HTTP endpoint, or server.ts spawned over stdio. */
export type Endpoint = { url: URL } | { stdio: string[] };

export interface LangChainAgentOptions {
  endpoint: Endpoint;
  /** With mcp-request-idempotency/langchain's middleware and wire wrapper, or without. */
  keyed: boolean;
  /** Further middleware, outermost first: a retry, a review after the tool. */
  middleware?: AgentMiddleware[];
  checkpointer?: BaseCheckpointSaver;
  /** Where the adapter's warnings go (default `console.warn`). */
  onWarning?: (message: string) => void;
  /** How long the agent waits for a tool's answer before that attempt fails (default: the SDK's 60 s). */
  toolTimeoutMs?: number;
}

export interface LangChainAgent {
  agent: ReturnType<typeof createAgent>;
  /** The agent's own MCP client (to read the ledger on the same connection). */
  client: Client;
  /** The server's stderr lines, over stdio (its decision log). */
  stderrLines: string[];
  close(): Promise<void>;
}

export async function connectLangChainAgent(options: LangChainAgentOptions): Promise<LangChainAgent> {
  const { endpoint, keyed, onWarning } = options;
  const stderrLines: string[] = [];
  const client = new Client({ name: 'langchain-agent', version: '0.1.0' });
  if ('url' in endpoint) {
    const fetch = keyed ? fetchWithIdempotencyKeys({ onWarning }) : undefined;
    await client.connect(new StreamableHTTPClientTransport(endpoint.url, { fetch }));
  } else {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['--import', 'tsx', join(ROOT, 'server.ts'), '--log-flush-ms', '0', ...endpoint.stdio],
      cwd: ROOT,
      env: getDefaultEnvironment(),
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => stderrLines.push(...chunk.toString('utf8').split('\n')));
    await client.connect(keyed ? transportWithIdempotencyKeys(transport, { onWarning }) : transport);
  }
  const tools = await loadMcpTools('payments', client, { defaultToolTimeout: options.toolTimeoutMs });
  // Enough answers for a run, its resume and a replay: the charge, then "done" whenever asked again.
  const model = fakeModel()
    .respondWithTools([CHARGE_CALL])
    .respond(new AIMessage('Charged 100.'))
    .respond(new AIMessage('Charged 100.'));
  const keys = keyed ? [idempotencyKeyMiddleware({ tools, onWarning })] : [];
  const agent = createAgent({
    model,
    tools,
    middleware: [...(options.middleware ?? []), ...keys],
    checkpointer: options.checkpointer,
  });
  return { agent, client, stderrLines, close: () => client.close() };
}

/** The ledger's balance, read with get_balance through `client`. */
export async function balanceThrough(client: Client): Promise<number> {
  const { structuredContent } = await client.callTool({ name: 'get_balance', arguments: {} });
  const balance: unknown = Reflect.get(Object(structuredContent), 'balance');
  if (typeof balance !== 'number')
    throw new Error(`get_balance returned no balance: ${JSON.stringify(structuredContent)}`);
  return balance;
}
