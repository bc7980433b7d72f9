// `node --import tsx --import ./test/conformance/harness/register.mjs <the suite's dist/index.js> server …`
// runs the published conformance suite's own CLI and runner with this folder's scenarios in it
// (README.md says why this way). Plain JavaScript: Node runs module hooks on a thread of their
// own, before any TypeScript loader could reach them.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
