// The SEP-3182 cases end to end over stdio: the real server process and the real SDK client, in
// both protocol eras; and the same cases against a server on the v1 SDK line with the v1 adapter.

import { LEGACY_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { ERAS } from '../../demo/processes/launch.js';
import { describeSepCases } from '../support/sep-cases.js';
import { connectStdio } from '../support/stdio.js';

for (const era of ERAS) {
  describeSepCases(`stdio, ${era}`, (args) => connectStdio(args, { era }), { transport: 'stdio' });
}

describeSepCases(
  'stdio, a server on the v1 SDK line (@modelcontextprotocol/sdk) with the v1 adapter',
  (args) => connectStdio(args, { era: LEGACY_PROTOCOL_VERSION, script: 'test/support/v1-server.ts' }),
  { transport: 'stdio' },
);
