// Real server processes serving stateless Streamable HTTP on loopback, and SDK clients for them.

import { connectHttpClient, startHttpInstance } from '../../client-demo.js';
import type { Connection } from './sep-cases.js';

export { connectHttpClient, type HttpInstance, startHttpInstance } from '../../client-demo.js';

/** One server process and one client: the shape the shared SEP cases expect. */
export async function connectHttp(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Connection> {
  const instance = await startHttpInstance(args, env);
  const client = await connectHttpClient(instance.url);
  return {
    client,
    close: async () => {
      await client.close();
      await instance.stop();
    },
  };
}
