// Real server processes serving stateless Streamable HTTP on loopback, and SDK clients for them.

import { connectHttpClient, type Era, startHttpInstance } from '../../launch.js';
import type { Connection } from './sep-cases.js';

export { connectHttpClient, type HttpInstance, startHttpInstance } from '../../launch.js';

/** One server process and one client: the shape the shared SEP cases expect. */
export async function connectHttp(args: string[], era: Era): Promise<Connection> {
  const instance = await startHttpInstance(args);
  const connected = await connectHttpClient(instance.url, { era });
  return {
    client: connected,
    close: async () => {
      await connected.close();
      await instance.stop();
    },
  };
}
