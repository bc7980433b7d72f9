// --- The top frames of a V8 .cpuprofile, by self time and by total time ---
//
//   npx tsx bench/cpuprofile-top.ts <file.cpuprofile> [how many]

import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

function isProfile(value: unknown): value is Profile {
  return (
    typeof value === 'object' &&
    value !== null &&
    Array.isArray(Reflect.get(value, 'nodes')) &&
    Array.isArray(Reflect.get(value, 'samples')) &&
    Array.isArray(Reflect.get(value, 'timeDeltas'))
  );
}

const [file, rawTop = '30'] = process.argv.slice(2);
if (!file) throw new Error('usage: cpuprofile-top.ts <file.cpuprofile> [how many]');
const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
if (!isProfile(parsed)) throw new Error(`${file} is not a V8 CPU profile`);
const profile = parsed;
const top = Number(rawTop);

const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);

const label = (node: ProfileNode): string => {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = url ? `${relative(process.cwd(), url.replace(/^file:\/\//, ''))}:${lineNumber + 1}` : '';
  return `${functionName || '(anonymous)'} ${where}`.trim();
};

const self = new Map<string, number>();
const total = new Map<string, number>();
let all = 0;
profile.samples.forEach((id, index) => {
  const delta = profile.timeDeltas[index] ?? 0;
  all += delta;
  const node = byId.get(id);
  if (!node) return;
  self.set(label(node), (self.get(label(node)) ?? 0) + delta);
  // Each frame on the stack once, however often it recurses.
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
    const frame = byId.get(at);
    if (!frame) break;
    const name = label(frame);
    if (seen.has(name)) continue;
    seen.add(name);
    total.set(name, (total.get(name) ?? 0) + delta);
  }
});

const print = (title: string, times: Map<string, number>) => {
  process.stdout.write(`\n${title} (of ${(all / 1000).toFixed(0)} ms sampled)\n`);
  const rows = [...times].sort((a, b) => b[1] - a[1]).slice(0, top);
  for (const [name, us] of rows) {
    process.stdout.write(`${((100 * us) / all).toFixed(1).padStart(6)}%  ${name}\n`);
  }
};
print('self time', self);
print('total time', total);
