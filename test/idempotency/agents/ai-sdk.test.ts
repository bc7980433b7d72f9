// The AI SDK adapter's key, over every shape of message the SDK accepts (`ai` 7's ModelMessage):
// strings and parts, provider options, tool calls and results, and the data of a file or image in
// every form (Uint8Array, Buffer, ArrayBuffer, base64, base64url, a data URL, a URL, bare or
// tagged), a conversation stored as JSON and read back. The AI SDK names the model's response by
// nothing but what was sent to it, so the key holds the digest of those messages:
//   - two conversations the model would see differently give two keys: a second charge is never
//     answered with the first one's result;
//   - one conversation, sent again in any of the forms, gives one key: its retry replays.
// What is checked is the key on the wire, sent by a tool the adapter wrapped.

import fc from 'fast-check';
import { checkIdempotencyKey } from 'mcp-request-idempotency';
import { UndigestibleMessageError, withIdempotencyKeys } from 'mcp-request-idempotency/ai-sdk';
import { describe, expect, it } from 'vitest';
import { agentWire } from '../../support/agent-wire.js';

// --- The key a tool call gets, read off the wire ---

interface Call {
  thread: string;
  tool: string;
  toolCallId: string;
}

/** The key the adapter sends for `call`, made by a response to `messages`. */
async function keyOf(call: Call, messages: unknown[]): Promise<unknown> {
  const wire = agentWire();
  const tool = {
    execute: async (input: unknown, _options: { toolCallId: string; messages: unknown[] }) =>
      wire.send(call.tool, input),
  };
  const tools = withIdempotencyKeys({ [call.tool]: tool }, { thread: call.thread });
  await tools[call.tool]?.execute({ amount: 100 }, { toolCallId: call.toolCallId, messages });
  const [key] = wire.keys();
  return key;
}

// --- Conversations as the model sees them, and the forms they may be given in ---
//
// An abstract conversation says what the model is sent; `render` writes it as a program might give
// it to the SDK, each file's data in a form the choices pick. The domains are small, so two drawn
// conversations are often equal, and often differ in one place only.

type Binary = { bytes: number[] } | { url: string };

type AbstractPart =
  | { type: 'text'; text: string; providerOptions?: Options }
  | { type: 'reasoning'; text: string }
  | { type: 'file'; data: Binary; mediaType: string; filename?: string; providerOptions?: Options }
  | { type: 'image'; data: Binary; mediaType?: string }
  | { type: 'tool-call'; toolCallId: string; toolName: string; input: { amount: number } }
  | { type: 'tool-result'; toolCallId: string; toolName: string; output: AbstractOutput };

type AbstractOutput =
  | { type: 'json'; value: { balance: number } }
  | { type: 'text'; value: string }
  | {
      type: 'content';
      value: ({ type: 'text'; text: string } | { type: 'file'; data: Binary; mediaType: string })[];
    };

interface AbstractMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | AbstractPart[];
  providerOptions?: Options;
}

type Options = Record<string, Record<string, string>>;

const text = fc.constantFrom('', 'Charge 100.', 'Charge 100 for order B.');
const mediaType = fc.constantFrom('application/pdf', 'image/png');
const providerOptions = fc.option(
  fc.constantFrom<Options>({}, { openai: { detail: 'low' } }, { openai: { detail: 'high' } }),
  {
    nil: undefined,
  },
);
const binary: fc.Arbitrary<Binary> = fc.oneof(
  fc.record({ bytes: fc.array(fc.constantFrom(0, 1, 0x25, 0xff), { maxLength: 3 }) }),
  fc.record({ url: fc.constantFrom('https://files.example/a.pdf', 'https://files.example/b.pdf') }),
);
const id = fc.constantFrom('call_0', 'call_1');
const name = fc.constantFrom('charge', 'refund');

/** Optional members are drawn present or absent, never present and undefined. */
const withOptional = <T extends object>(value: T): T =>
  Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;

const textPart = fc.record({ type: fc.constant('text' as const), text, providerOptions }).map(withOptional);
const filePart = fc
  .record({
    type: fc.constant('file' as const),
    data: binary,
    mediaType,
    filename: fc.option(fc.constantFrom('invoice.pdf'), { nil: undefined }),
    providerOptions,
  })
  .map(withOptional);
const imagePart = fc
  .record({
    type: fc.constant('image' as const),
    data: binary,
    mediaType: fc.option(mediaType, { nil: undefined }),
  })
  .map(withOptional);
const output: fc.Arbitrary<AbstractOutput> = fc.oneof(
  fc.record({ type: fc.constant('json' as const), value: fc.record({ balance: fc.constantFrom(100, 200) }) }),
  fc.record({ type: fc.constant('text' as const), value: text }),
  fc.record({
    type: fc.constant('content' as const),
    value: fc.array(
      fc.oneof(
        fc.record({ type: fc.constant('text' as const), text }),
        fc.record({ type: fc.constant('file' as const), data: binary, mediaType }),
      ),
      { maxLength: 2 },
    ),
  }),
);

const message: fc.Arbitrary<AbstractMessage> = fc.oneof(
  fc.record({ role: fc.constant('system' as const), content: text }),
  fc
    .record({
      role: fc.constant('user' as const),
      content: fc.oneof(text, fc.array(fc.oneof(textPart, filePart, imagePart), { maxLength: 3 })),
      providerOptions,
    })
    .map(withOptional),
  fc.record({
    role: fc.constant('assistant' as const),
    content: fc.oneof(
      text,
      fc.array(
        fc.oneof(
          textPart,
          fc.record({ type: fc.constant('reasoning' as const), text }),
          fc.record({
            type: fc.constant('tool-call' as const),
            toolCallId: id,
            toolName: name,
            input: fc.record({ amount: fc.constantFrom(100, 200) }),
          }),
          filePart,
        ),
        { maxLength: 2 },
      ),
    ),
  }),
  fc.record({
    role: fc.constant('tool' as const),
    content: fc.array(
      fc.record({ type: fc.constant('tool-result' as const), toolCallId: id, toolName: name, output }),
      { minLength: 1, maxLength: 2 },
    ),
  }),
);

const conversation = fc.array(message, { minLength: 1, maxLength: 3 });
const call: fc.Arbitrary<Call> = fc.record({
  thread: fc.constantFrom('chat-1', 'chat-2'),
  tool: name,
  toolCallId: id,
});

/** Picks the form of each file's data in turn, from the choices drawn. */
class Forms {
  private next = 0;
  constructor(private readonly choices: readonly number[]) {}
  pick(n: number): number {
    const choice = this.choices[this.next++ % this.choices.length] ?? 0;
    return choice % n;
  }
}
const forms = fc.array(fc.nat(), { minLength: 1, maxLength: 12 }).map((choices) => () => new Forms(choices));

const base64 = (bytes: number[]) => Buffer.from(bytes).toString('base64');

/** Bytes in one of the forms the SDK takes for them (a data URL only where the media type is known). */
function bytesIn(bytes: number[], mediaType: string | undefined, forms: Forms, tagged: boolean): unknown {
  const raw = [
    () => Uint8Array.from(bytes),
    () => Buffer.from(bytes),
    () => Uint8Array.from(bytes).buffer,
    () => base64(bytes),
    () => Buffer.from(bytes).toString('base64url'),
  ];
  const dataUrl = mediaType === undefined ? [] : [() => `data:${mediaType};base64,${base64(bytes)}`];
  const taggedForms = tagged
    ? [
        () => ({ type: 'data', data: raw[forms.pick(raw.length)]?.() }),
        ...dataUrl.map((url) => () => ({ type: 'url', url: new URL(url()) })),
      ]
    : [];
  const all = [
    ...raw,
    ...dataUrl,
    ...(mediaType === undefined ? [] : [() => new URL(dataUrl[0]?.() ?? '')]),
    ...taggedForms,
  ];
  return all[forms.pick(all.length)]?.();
}

/** A file's data in one of its forms: bare where a part takes it bare, tagged where it may be. */
function dataIn(data: Binary, mediaType: string | undefined, forms: Forms, bare: boolean): unknown {
  if ('bytes' in data) {
    if (!bare) {
      const inner = bytesIn(data.bytes, undefined, forms, false);
      return { type: 'data', data: inner };
    }
    return bytesIn(data.bytes, mediaType, forms, true);
  }
  const url = new URL(data.url);
  const all = bare
    ? [() => url, () => data.url, () => ({ type: 'url', url })]
    : [() => ({ type: 'url', url })];
  return all[forms.pick(all.length)]?.();
}

/** The conversation as a program gives it to the SDK, its files' data in the forms `forms` picks. */
function render(messages: AbstractMessage[], forms: Forms): unknown[] {
  const part = (p: AbstractPart | { type: 'text'; text: string }): unknown => {
    switch (p.type) {
      case 'file':
        return { ...p, data: dataIn(p.data, p.mediaType, forms, true) };
      case 'image': {
        const { data, ...rest } = p;
        return { ...rest, image: dataIn(data, p.mediaType, forms, true) };
      }
      case 'tool-result':
        if (p.output.type !== 'content') return p;
        return {
          ...p,
          output: {
            ...p.output,
            value: p.output.value.map((item) =>
              item.type === 'file'
                ? { ...item, data: dataIn(item.data, item.mediaType, forms, false) }
                : item,
            ),
          },
        };
      default:
        return { ...p };
    }
  };
  return messages.map((m) => ({
    ...m,
    content: typeof m.content === 'string' ? m.content : m.content.map(part),
  }));
}

/**
 * The conversation as a program stores it and reads it back: JSON, its bytes written as base64 and
 * its URLs as strings (the SDK's parts take both).
 */
function storedAndRead(messages: unknown): unknown {
  const storable = (value: unknown): unknown => {
    if (value instanceof Uint8Array) return Buffer.from(value).toString('base64');
    if (value instanceof ArrayBuffer) return Buffer.from(value).toString('base64');
    if (value instanceof URL) return value.href;
    if (Array.isArray(value)) return value.map(storable);
    if (typeof value === 'object' && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, storable(v)]));
    }
    return value;
  };
  return JSON.parse(JSON.stringify(storable(messages)));
}

describe('the AI SDK key, over every message shape the SDK accepts', () => {
  it('is one key for one conversation, whatever form its files are given in, and once stored and read back', async () => {
    await fc.assert(
      fc.asyncProperty(call, conversation, forms, forms, async (c, messages, formsA, formsB) => {
        const given = render(messages, formsA());
        const key = await keyOf(c, given);
        expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
        expect(await keyOf(c, render(messages, formsB()))).toBe(key);
        expect(await keyOf(c, storedAndRead(given) as unknown[])).toBe(key);
      }),
      { numRuns: 400 },
    );
  });

  it('is two keys for two conversations the model would see differently, or two calls', async () => {
    await fc.assert(
      fc.asyncProperty(
        call,
        conversation,
        forms,
        call,
        conversation,
        forms,
        async (c1, m1, f1, c2, m2, f2) => {
          const [k1, k2] = [await keyOf(c1, render(m1, f1())), await keyOf(c2, render(m2, f2()))];
          const same = JSON.stringify([c1, m1]) === JSON.stringify([c2, m2]);
          expect(k1 === k2).toBe(same);
        },
      ),
      { numRuns: 1_000 },
    );
  });
});

/** `messages` with its `which`-th file of bytes (counted round) one byte longer; undefined if it has none. */
function withOneFileChanged(messages: AbstractMessage[], which: number): AbstractMessage[] | undefined {
  const copy = structuredClone(messages);
  const files: number[][] = [];
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(visit);
    else if (typeof value === 'object' && value !== null) {
      const bytes: unknown = Reflect.get(value, 'bytes');
      if (Array.isArray(bytes)) files.push(bytes);
      else Object.values(value).forEach(visit);
    }
  };
  visit(copy);
  const file = files[which % Math.max(files.length, 1)];
  file?.push(0x25);
  return file === undefined ? undefined : copy;
}

describe('the AI SDK key, one file changed', () => {
  it('is two keys for a conversation and the same with one file’s bytes changed, in the same forms', async () => {
    await fc.assert(
      fc.asyncProperty(call, conversation, fc.nat(), forms, async (c, messages, which, f) => {
        const changed = withOneFileChanged(messages, which);
        fc.pre(changed !== undefined);
        // The same choices, so each file takes the same form in both.
        expect(await keyOf(c, render(changed ?? [], f()))).not.toBe(await keyOf(c, render(messages, f())));
      }),
      { numRuns: 400 },
    );
  });
});

describe('two prompt-only turns that differ only in their attached invoice', () => {
  const invoiceTurn = (data: unknown) => [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'Charge the invoice attached.' },
        { type: 'file', mediaType: 'application/pdf', data },
      ],
    },
  ];
  const charge = { thread: 'chat-1', tool: 'charge', toolCallId: 'call_0' };
  const twoInvoices: [string, (text: string) => unknown][] = [
    ['an ArrayBuffer (blob.arrayBuffer())', (t) => Uint8Array.from(Buffer.from(t)).buffer],
    ['a Uint8Array', (t) => Uint8Array.from(Buffer.from(t))],
    ['a Buffer', (t) => Buffer.from(t)],
    ['a base64 string', (t) => Buffer.from(t).toString('base64')],
    ['a data URL', (t) => `data:application/pdf;base64,${Buffer.from(t).toString('base64')}`],
    ['a URL', (t) => new URL(`https://files.example/${t}`)],
  ];

  it.each(twoInvoices)('get two keys when the invoice is %s', async (_, form) => {
    const first = await keyOf(charge, invoiceTurn(form('Invoice 1: 100')));
    const second = await keyOf(charge, invoiceTurn(form('Invoice 2: 100')));
    expect(second).not.toBe(first);
  });

  it.each([
    ['a Map', new Map([['invoice', 1]]), new Map([['invoice', 2]])],
    ['a Set', new Set([1]), new Set([2])],
    ['a Date', new Date(0), new Date(1)],
    ['a URL', new URL('https://files.example/1'), new URL('https://files.example/2')],
  ])('get two keys when provider options differ only in %s', async (_, a, b) => {
    const turn = (value: unknown) => [
      { role: 'user', content: 'Charge the invoice.', providerOptions: { app: { invoice: value } } },
    ];
    expect(await keyOf(charge, turn(a))).not.toBe(await keyOf(charge, turn(b)));
  });
});

describe('a value the digest cannot write', () => {
  class Invoice {
    readonly #total: number;
    constructor(total: number) {
      this.#total = total;
    }
    get total() {
      return this.#total;
    }
  }
  const cyclic: Record<string, unknown> = { role: 'user', content: 'Charge.' };
  cyclic.self = cyclic;

  it.each([
    [
      'a Blob',
      [{ role: 'user', content: [{ type: 'file', mediaType: 'application/pdf', data: new Blob(['1']) }] }],
      '$[0].content[0].data',
      'an object of class Blob',
    ],
    [
      'a class instance',
      [{ role: 'user', content: 'Charge.', providerOptions: { app: { invoice: new Invoice(1) } } }],
      '$[0].providerOptions.app.invoice',
      'an object of class Invoice',
    ],
    [
      'a function',
      [{ role: 'user', content: 'Charge.', providerOptions: { app: { total: () => 1 } } }],
      '$[0].providerOptions.app.total',
      'a function',
    ],
    ['a cycle', [cyclic], '$[0].self', 'a cycle'],
  ])('refuses %s: the call fails, unsent, and the error says where', async (_, messages, path, what) => {
    const wire = agentWire();
    const tools = withIdempotencyKeys(
      {
        charge: {
          execute: async (input: unknown, _o: { toolCallId: string; messages: unknown[] }) =>
            wire.send('charge', input),
        },
      },
      { thread: 'chat-1' },
    );
    const refused = tools.charge.execute({ amount: 100 }, { toolCallId: 'call_0', messages });
    await expect(refused).rejects.toThrow(UndigestibleMessageError);
    await expect(refused).rejects.toThrow(`${what} at ${path}`);
    expect(wire.keys()).toStrictEqual([]);
  });
});
