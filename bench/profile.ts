// --- One variant in a loop, in process, for `node --cpu-prof` ---
//
//   node --cpu-prof --cpu-prof-dir=bench/profiles --import tsx bench/profile.ts first 50000
//   npx tsx bench/cpuprofile-top.ts bench/profiles/<file>.cpuprofile
//
// The in-process transport is where the guard's own cost is most visible: no pipe, no
// socket, nothing between the client and the guard but the SDK.

import { openPair } from './endpoints.js';
import { makeVariants, settleCall, VARIANTS, type VariantName } from './variants.js';

function isVariant(value: string | undefined): value is VariantName {
  return VARIANTS.some((variant) => variant === value);
}

const [name = 'first', rawCalls = '50000'] = process.argv.slice(2);
if (!isVariant(name)) throw new Error(`variant must be one of ${VARIANTS.join(', ')}, got ${name}`);
const calls = Number(rawCalls);
const pair = await openPair('in-process', 'memory', undefined);
try {
  const variant = makeVariants(pair.fast, pair.slow, 'profile').find((v) => v.name === name);
  if (!variant) throw new Error(`no variant ${name}`);
  const batch = 1_000;
  const started = performance.now();
  for (let done = 0; done < calls; done += batch) {
    await variant.prepare(batch);
    for (let i = 0; i < batch; i++) variant.check(await settleCall(() => variant.call(i)));
    await variant.finish();
    pair.fast.forgetLogs();
    pair.slow.forgetLogs();
  }
  const us = ((performance.now() - started) * 1000) / calls;
  process.stdout.write(`${name}: ${calls} calls, ${us.toFixed(1)} µs per call (mean, checks included)\n`);
  await variant.settle();
} finally {
  await pair.close();
}
