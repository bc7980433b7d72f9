// --- Module hooks: this folder's scenarios registered in the published suite's runner ---
//
// The suite ships one minified bundle that exports nothing and registers its scenarios in a
// private map (0.2.0-alpha.12, verified: `export{}`, no option loads a scenario from a file). So
// when Node loads that bundle, these hooks (1) import the scenario module, (2) add its scenario to
// the map the `server` command reads, and (3) export the three helpers the scenario imports from
// `../../connection` and `../untestable`, to which its relative imports are pointed. Upstream,
// none of this exists: the scenario file drops into `src/scenarios/server/` unchanged and is
// listed in `src/scenarios/index.ts` (see ../registration.diff).
//
// Each piece is found by a stable string of the suite's own (a user-facing message, a header
// name, the untestable prefix), and each must be found exactly once: a suite build that moves
// any of them stops the run with a message naming which, never runs without the scenario.

const SCENARIOS = new URL('../src/scenarios/', import.meta.url).href;
const SCENARIO = new URL('../src/scenarios/server/idempotency.ts', import.meta.url).href;
const SUITE = new URL(
  '../../interop/node_modules/@modelcontextprotocol/conformance-2026/dist/index.js',
  import.meta.url,
).href;

/** What the scenarios import from the suite, as upstream modules name them. */
const SUITE_MODULES = new Set(['../../types', '../../connection', '../untestable']);

export async function resolve(specifier, context, next) {
  if (context.parentURL?.startsWith(SCENARIOS) && SUITE_MODULES.has(specifier))
    return { url: SUITE, format: 'module', shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  const loaded = await next(url, context);
  if (url !== SUITE) return loaded;
  return { ...loaded, source: withScenarios(String(loaded.source)), shortCircuit: true };
}

/**
 * The bundle's source with the scenario imported and registered, and the helpers exported. Exported
 * for the test that shows it refusing a bundle it cannot read.
 */
export function withScenarios(source) {
  const one = (what, pattern) => {
    const found = [...source.matchAll(pattern)];
    if (found.length !== 1)
      throw new Error(
        `conformance harness: ${what} found ${found.length} times in ${SUITE}, not once; ` +
          'the suite build changed, so test/conformance/harness/hooks.mjs needs updating for it',
      );
    return found[0][1];
  };
  const lister = one(
    'the server scenario listing',
    /Server scenarios \(test against a server\):`\);let [\w$]+=([\w$]+)\(\)/g,
  );
  const serverScenarios = one(
    'the server scenario map',
    new RegExp(`function ${escapeRegExp(lister)}\\(\\)\\{return Array\\.from\\(([\\w$]+)\\.keys\\(\\)\\)\\}`, 'g'),
  );
  const buildStandardHeaders = one(
    'buildStandardHeaders',
    /function ([\w$]+)\(e,t,n=\{\}\)\{let r=\{"Content-Type":`application\/json`,Accept:`application\/json, text\/event-stream`,"MCP-Protocol-Version"/g,
  );
  const withRequestMeta = one(
    'withRequestMeta',
    /function ([\w$]+)\(e,t=[\w$]+\)\{return\{\.\.\.e,_meta:\{"io\.modelcontextprotocol\/protocolVersion":t,/g,
  );
  const untestableCheck = one(
    'untestableCheck',
    /function ([\w$]+)\(e,t,n,r,i,a=`FAILURE`\)\{return\{id:e,name:t,description:n,status:a,[^}]*details:\{untestable:!0,reason:r\}/g,
  );
  const cli = one('the CLI start', /([\w$]+)\.parse\(\);export\{\};\s*$/g);

  const imports = `import{IdempotencyScenario as __Sep3182Scenario}from${JSON.stringify(SCENARIO)};`;
  // An expression: the bundle's last statement is a comma expression that ends in the parse.
  const registration = `(()=>{const s=new __Sep3182Scenario();${serverScenarios}.set(s.name,s)})(),`;
  const exports =
    `export{${buildStandardHeaders} as buildStandardHeaders,${withRequestMeta} as withRequestMeta,` +
    `${untestableCheck} as untestableCheck};`;
  const [shebang, ...rest] = source.split('\n');
  return [shebang, imports, ...rest]
    .join('\n')
    .replace(/([\w$]+)\.parse\(\);export\{\};\s*$/, `${registration}${cli}.parse();${exports}\n`);
}

const escapeRegExp = (name) => name.replace(/\$/g, '\\$');
