// Real server processes serving stateless Streamable HTTP on loopback, and clients for them.

import { connect, type Peer } from '../../packages/checker/wire.js';
import { connectHttpClient, type Era, startHttpInstance } from '../../processes/launch.js';
import { type Connection, PEER_TIMEOUT_MS } from './sep-cases.js';

export { connectHttpClient, type HttpInstance, startHttpInstance } from '../../processes/launch.js';

/** Alice may do everything with token-a and only read with token-r; bob is another caller. */
const TOKENS = 'alice:token-a:charge+refund+read+admin,alice:token-r:read,bob:token-b';

/**
 * One server process with bearer auth, an SDK client and raw peers for alice, and raw peers for
 * bob and for alice's read-only token: the shape the shared SEP cases expect.
 */
export async function connectHttp(args: string[], era: Era): Promise<Connection> {
  const instance = await startHttpInstance(args, { DEMO_BEARER_TOKENS: TOKENS });
  const peer = (token: string): Promise<Peer> =>
    connect(
      { kind: 'http', url: instance.url, headers: { authorization: `Bearer ${token}` } },
      { era, timeoutMs: PEER_TIMEOUT_MS },
    );
  const [client, alice, other, forbidden] = await Promise.all([
    connectHttpClient(instance.url, { era, token: 'token-a' }),
    peer('token-a'),
    peer('token-b'),
    peer('token-r'),
  ]);
  return {
    client,
    peer: alice,
    callers: { other, forbidden },
    close: async () => {
      await client.close();
      await instance.stop();
    },
  };
}
