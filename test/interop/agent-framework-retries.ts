// --- Scenario 18: the agent framework retries the tool call itself ---
//
// Most retries that charge twice are not the application's: they are the agent framework's,
// and its MCP client sends no key. A LangChain agent (createAgent, toolRetryMiddleware, the MCP
// adapters) whose charge is answered 502 after the server ran it, as the framework comes and with
// mcp-request-idempotency/langchain, which keys the call from the model's tool-call id.

import { toolRetryMiddleware } from 'langchain';
import { balanceOf, connectHttpClient, resetLedger, startHttpInstance } from '../../demo/processes/launch.js';
import { expect, heading, say } from '../../demo/scenarios/narration.js';
import { type FaultProxy, startFaultProxy } from '../support/fault-proxy.js';
import { CHARGE_CALL, connectLangChainAgent } from './langchain-agent.js';

export async function agentFrameworkRetries(): Promise<void> {
  const s = '18 agent framework retries';
  heading(
    'Scenario 18: the agent framework retries the tool call itself',
    `A LangChain agent asks for ${CHARGE_CALL.name}(100) (tool-call id ${CHARGE_CALL.id}); a proxy answers 502 once the server has run it, and toolRetryMiddleware runs the call again. Stateless HTTP.`,
  );
  const instance = await startHttpInstance();
  const reader = await connectHttpClient(instance.url);
  try {
    for (const keyed of [false, true]) {
      await resetLedger(reader);
      say(keyed ? '  with mcp-request-idempotency/langchain:' : '  as the framework comes:');
      const proxy = await startFaultProxy(instance.url, { fault: 'badGateway', tool: CHARGE_CALL.name });
      const { agent, close } = await connectLangChainAgent({
        endpoint: { url: proxy.url },
        keyed,
        middleware: [toolRetryMiddleware({ initialDelayMs: 10 })],
      });
      try {
        await agent.invoke({ messages: [{ role: 'user', content: 'Charge 100.' }] });
      } finally {
        await close();
        await proxy.close();
      }
      const keys = sayAttempts(proxy);
      const balance = await balanceOf(reader);
      if (!keyed) {
        expect(
          s,
          'without a key, the retry charged the customer a second time',
          balance === 200,
          `balance ${balance}`,
        );
        continue;
      }
      expect(
        s,
        'with the adapter, both attempts carried the one key derived from the tool call',
        keys.length === 2 && typeof keys[0] === 'string' && keys[1] === keys[0],
        `${keys.length} attempts, ${new Set(keys).size} key`,
      );
      const decided = (await instance.decisions())
        .filter((d) => d.idempotencyKey === keys[0])
        .map((d) => String(d.decision));
      say(`  the server decided: ${decided.join(', ')}`);
      expect(
        s,
        'the retry got the stored answer: charged once',
        balance === 100 && decided.join() === 'executed,replayed',
        `balance ${balance}`,
      );
    }
  } finally {
    await reader.close();
    await instance.stop();
  }
}

/** One line per tools/call of the charge as it crossed the proxy; the keys they carried. */
function sayAttempts(proxy: FaultProxy): unknown[] {
  const charges = proxy.calls.filter((c) => c.name === CHARGE_CALL.name);
  charges.forEach((c, i) => {
    const answer = c.answered === 'forwarded' ? 'answered' : '502 from the proxy (the server had charged)';
    say(`    attempt ${i + 1}, idempotencyKey ${String(c.idempotencyKey ?? 'none')}: ${answer}`);
  });
  return charges.map((c) => c.idempotencyKey);
}
