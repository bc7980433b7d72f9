// --- A loopback proxy that loses the answer after the server ran the call ---
//
// In front of a stateless HTTP server: every request goes through unchanged, but the first
// `times` tools/call requests of `tool` get a fault in place of their answer, once the server
// has answered them in full (the tool ran, its answer is lost): a 502 as a gateway would send,
// or the socket reset. Every tools/call is noted as it went over the wire, key and all.

import { once } from 'node:events';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  request,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the client gets in place of the answer. */
export type Fault = 'badGateway' | 'reset';

export interface ToolCallOnTheWire {
  name: unknown;
  arguments: unknown;
  /** `params.idempotencyKey` as sent; undefined when the call carried none. */
  idempotencyKey: unknown;
  /** Whether the client got the answer or the fault. */
  answered: 'forwarded' | Fault;
}

export interface FaultProxy {
  /** The proxy's endpoint: the server's URL with the proxy's port. */
  url: URL;
  /** Every tools/call that went through, in order. */
  calls: ToolCallOnTheWire[];
  close(): Promise<void>;
}

export interface FaultPlan {
  fault: Fault;
  /** The tool whose calls get the fault. */
  tool: string;
  /** How many of its calls get it (default 1): the calls after them go through. */
  times?: number;
}

export async function startFaultProxy(upstream: URL, plan: FaultPlan): Promise<FaultProxy> {
  let faultsLeft = plan.times ?? 1;
  const calls: ToolCallOnTheWire[] = [];
  const relay = async (incoming: IncomingMessage, outgoing: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of incoming) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const call = toolCallIn(body);
    const fault = call?.name === plan.tool && faultsLeft > 0 ? plan.fault : undefined;
    if (fault) faultsLeft -= 1;
    if (call) calls.push({ ...call, answered: fault ?? 'forwarded' });

    const forwarded = request(upstream, {
      method: incoming.method,
      headers: { ...withoutHopHeaders(incoming.headers), host: upstream.host },
    });
    forwarded.on('error', () => outgoing.destroy());
    forwarded.end(body);
    const [answer] = (await once(forwarded, 'response')) as [IncomingMessage];
    if (!fault) {
      outgoing.writeHead(answer.statusCode ?? 502, withoutHopHeaders(answer.headers));
      answer.pipe(outgoing);
      return;
    }
    // The server's whole answer first: by then the tool has run, and only the answer is lost.
    for await (const _ of answer);
    if (fault === 'reset') incoming.socket.destroy();
    else outgoing.writeHead(502, { 'content-type': 'text/plain' }).end('Bad Gateway');
  };
  // A request cut off midway (the client gone, the server stopped, the proxy closed under it) ends
  // its connection, as a proxy that lost its peer would: a rejection left unheard here would fail
  // the whole test run, whichever test was running.
  const server = createServer((incoming, outgoing) => {
    relay(incoming, outgoing).catch(() => outgoing.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const url = new URL(upstream);
  url.port = String(port);
  return {
    url,
    calls,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** The params of a JSON-RPC tools/call in `body`, if that is what it is. */
function toolCallIn(body: Buffer): Omit<ToolCallOnTheWire, 'answered'> | undefined {
  let message: unknown;
  try {
    message = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (Reflect.get(Object(message), 'method') !== 'tools/call') return undefined;
  const params = Object(Reflect.get(Object(message), 'params'));
  return {
    name: Reflect.get(params, 'name'),
    arguments: Reflect.get(params, 'arguments'),
    idempotencyKey: Reflect.get(params, 'idempotencyKey'),
  };
}

/** Headers that describe one connection, not the message: the proxy has its own. */
function withoutHopHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const { connection: _c, 'keep-alive': _k, 'transfer-encoding': _t, host: _h, ...rest } = headers;
  return rest;
}
