// --- What the model saw: the digest that tells its responses apart ---
//
// Some providers number their tool-call ids per response (`call_0`, `call_1`), so a tool call's key
// also names the model's response that issued it, and where a framework gives that response no id
// of its own the adapter names it by what was sent to the model for it. Two rules follow, and this
// file keeps both:
//   - Total: every value a framework accepts in a message is written as itself. Binary data is its
//     bytes, whichever form carries them (Uint8Array, Buffer, ArrayBuffer, a base64 string, a data
//     URL), so one conversation stored and read back gives the digest it gave before; a URL is its
//     address, a Date its time, a Map or Set its entries. Two messages that differ anywhere the model
//     could see give two digests, so two responses never share a key and one charge never answers
//     for another.
//   - Refuse what cannot be written: a value with no form to digest (a Blob, a class instance, a
//     function, a cycle) throws `UndigestibleMessageError`, naming where it is. Nothing falls back to
//     a digest of less (the messages' count, their JSON) that two other responses might share.
//
// The writing is a tagged, length-prefixed encoding fed to SHA-256: every value begins with its
// kind and says how long it is, so no two values write the same bytes (a string is never read as
// the bytes of a file, nor an array as an object).

import { createHash } from 'node:crypto';
import { types } from 'node:util';

/** A value in the messages that has no form to digest: the tool call is refused, not keyed as another. */
export class UndigestibleMessageError extends Error {
  override readonly name = 'UndigestibleMessageError';
  constructor(
    /** Where in the messages it is, as `messages[0].content[1].data`. */
    readonly path: string,
    what: string,
  ) {
    super(
      `The messages sent to the model hold ${what} at ${path}: no idempotencyKey can be derived from them that ` +
        'another response could not share, so the tool call was not made. Give binary data as a Uint8Array, ' +
        'Buffer, ArrayBuffer, base64 string or URL, and other values as JSON.',
    );
  }
}

/**
 * The digest of `value`, what was sent to the model (base64url SHA-256). Messages of the AI SDK's
 * shape (`{ role, content: [parts] }`) have the data of their file and image parts read as the SDK
 * reads it (see `asSent`); everything else is written as it is.
 */
export function digestOfModelInput(value: unknown): string {
  const hash = createHash('sha256');
  new Writer((chunk) => hash.update(chunk)).write(asSent(value), '$');
  return hash.digest('base64url');
}

// --- The AI SDK's parts, as sent ---
//
// A file or image part's data may be given as a URL, a URL string, a data URL, a base64 string or
// bytes in three types, bare or tagged (`{ type: 'data', data }`, `{ type: 'url', url }`); the SDK
// turns each into one tagged form before the provider sees it (ai 7, `convertToLanguageModelV4FilePart`).
// So does this, as far as the digest needs: bytes as a Uint8Array, an address as a URL, and the media
// type a data URL names in place of the part's. Only parts in a message's `content` (and files in a
// tool result's content) are read so: the same shape anywhere else is data, written as it is.

/** The part types whose data field carries a file (the field's name). */
const FILE_FIELDS: Readonly<Record<string, string>> = {
  file: 'data',
  'reasoning-file': 'data',
  image: 'image',
};

/** `value` with every message's file data in one form: what the SDK sends for it. */
function asSent(value: unknown): unknown {
  if (!Array.isArray(value)) return value;
  return value.map((message, i) => {
    if (!isPlainObject(message)) return message;
    const read = membersOf(message, `$[${i}]`);
    if (!Array.isArray(read.content)) return read;
    return { ...read, content: read.content.map((part, j) => partAsSent(part, `$[${i}].content[${j}]`)) };
  });
}

function partAsSent(value: unknown, path: string): unknown {
  if (!isPlainObject(value)) return value;
  const part = membersOf(value, path);
  const output = isPlainObject(part.output) ? membersOf(part.output, `${path}.output`) : part.output;
  if (part.type === 'tool-result' && isPlainObject(output) && output.type === 'content') {
    const items = output.value;
    if (!Array.isArray(items)) return part;
    const value = items.map((item, k) => partAsSent(item, `${path}.output.value[${k}]`));
    return { ...part, output: { ...output, value } };
  }
  const field = typeof part.type === 'string' ? FILE_FIELDS[part.type] : undefined;
  if (field === undefined || !(field in part)) return part;
  const { data, mediaType } = fileDataAsSent(part[field], `${path}.${field}`);
  const sent: Record<string, unknown> = { ...part, [field]: data };
  // The SDK's order: the media type a data URL names, else the part's own.
  if (mediaType !== undefined) sent.mediaType = mediaType;
  return sent;
}

/** File data in its tagged form, with the media type a data URL names (ai 7's reading of it). */
function fileDataAsSent(value: unknown, path: string): { data: unknown; mediaType?: string } {
  if (isPlainObject(value)) {
    const data = membersOf(value, path);
    if (data.type === 'data') return { data: { ...data, data: bytesOf(data.data) } };
    if (data.type === 'url') {
      const url =
        data.url instanceof URL
          ? data.url
          : URL.canParse(String(data.url))
            ? new URL(String(data.url))
            : undefined;
      return url === undefined ? { data } : urlAsSent(url, data);
    }
    // `reference` and `text` are written as they are; a bare provider reference is a reference.
    if (data.type === 'reference' || data.type === 'text') return { data };
    return { data: { type: 'reference', reference: data } };
  }
  const data = value;
  if (data instanceof URL) return urlAsSent(data);
  // A string is an address if it parses as one (base64 has no `:`), else base64.
  if (typeof data === 'string' && URL.canParse(data)) {
    const url = new URL(data);
    return urlAsSent(url, url.href === data ? {} : { originalUrl: data });
  }
  return { data: { type: 'data', data: bytesOf(data) } };
}

/**
 * A plain object's members, each read once, where the SDK reads it: a getter that throws is the
 * refusal of that member, by its path, as anywhere else in the messages.
 */
function membersOf(value: Record<string, unknown>, path: string): Record<string, unknown> {
  return Object.fromEntries(Object.keys(value).map((key) => [key, read(value, key, `${path}.${key}`)]));
}

function urlAsSent(url: URL, tagged: Record<string, unknown> = {}): { data: unknown; mediaType?: string } {
  if (url.protocol !== 'data:') return { data: { ...tagged, type: 'url', url } };
  // `data:<media type>[;base64],<content>`, split as the SDK splits it.
  const [header = '', content = ''] = url.href.split(',');
  const mediaType = header.split(';')[0]?.split(':')[1];
  return { data: { type: 'data', data: bytesOf(content) }, ...(mediaType !== undefined && { mediaType }) };
}

/**
 * Bytes as a Uint8Array, from any form the SDK takes for them; a base64 string decoded as the SDK
 * decodes it (base64url too), or left a string if it is not base64, so it is still told apart.
 */
function bytesOf(data: unknown): unknown {
  if (types.isUint8Array(data)) return data;
  if (types.isAnyArrayBuffer(data)) return new Uint8Array(data);
  if (typeof data !== 'string') return data;
  try {
    return Uint8Array.from(atob(data.replaceAll('-', '+').replaceAll('_', '/')), (c) => c.charCodeAt(0));
  } catch {
    return data;
  }
}

// --- The encoding ---

/** One byte naming each kind of value, written before it. */
const Kind = {
  null: 0x00,
  undefined: 0x01,
  false: 0x02,
  true: 0x03,
  number: 0x04,
  bigint: 0x05,
  string: 0x06,
  bytes: 0x07,
  typedArray: 0x08,
  url: 0x09,
  date: 0x0a,
  array: 0x0b,
  object: 0x0c,
  map: 0x0d,
  set: 0x0e,
} as const;

/** Deeper than any message is nested, and short of the stack. */
const MAX_DEPTH = 256;

class Writer {
  /** The objects being written, outermost first: one met again is a cycle. */
  private readonly ancestors = new Set<object>();

  constructor(private readonly out: (chunk: Uint8Array) => void) {}

  write(value: unknown, path: string, depth = 0): void {
    if (value === null) this.kind(Kind.null);
    else if (value === undefined) this.kind(Kind.undefined);
    else if (typeof value === 'boolean') this.kind(value ? Kind.true : Kind.false);
    else if (typeof value === 'number') this.number(value);
    else if (typeof value === 'string') this.string(Kind.string, value);
    else if (typeof value === 'bigint') this.string(Kind.bigint, value.toString());
    else if (typeof value === 'object') this.object(value, path, depth);
    else throw new UndigestibleMessageError(path, `a ${typeof value}`);
  }

  private object(value: object, path: string, depth: number): void {
    if (depth > MAX_DEPTH) throw new UndigestibleMessageError(path, `values nested deeper than ${MAX_DEPTH}`);
    if (this.ancestors.has(value)) throw new UndigestibleMessageError(path, 'a cycle');
    this.ancestors.add(value);
    try {
      this.contents(value, path, depth + 1);
    } finally {
      this.ancestors.delete(value);
    }
  }

  private contents(value: object, path: string, depth: number): void {
    if (types.isUint8Array(value)) this.bytes(Kind.bytes, value);
    else if (types.isAnyArrayBuffer(value)) this.bytes(Kind.bytes, new Uint8Array(value));
    else if (ArrayBuffer.isView(value)) {
      // Another typed array, or a DataView: its bytes, under its type's name.
      this.string(Kind.typedArray, Object.prototype.toString.call(value));
      this.bytes(Kind.bytes, new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
    } else if (value instanceof URL) this.string(Kind.url, value.href);
    else if (types.isDate(value)) {
      this.kind(Kind.date);
      this.float(value.getTime());
    } else if (Array.isArray(value)) {
      this.count(Kind.array, value.length);
      // A hole is written as undefined: no message has one, and it is not any value's neighbour.
      for (let i = 0; i < value.length; i++) this.write(value[i], `${path}[${i}]`, depth);
    } else if (types.isMap(value)) {
      const entries = [...value].map(([k, v], i) => this.apart([k, v], `${path}.<entry ${i}>`, depth));
      this.sorted(Kind.map, entries);
    } else if (types.isSet(value)) {
      this.sorted(
        Kind.set,
        [...value].map((v, i) => this.apart(v, `${path}.<element ${i}>`, depth)),
      );
    } else if (isPlainObject(value)) this.members(value, path, depth);
    else throw new UndigestibleMessageError(path, describe(value));
  }

  /** Members in code-unit order; an undefined member is an absent one, as JSON and the SDKs read it. */
  private members(value: Record<string, unknown>, path: string, depth: number): void {
    const members = Object.keys(value)
      .sort()
      .map((key) => [key, read(value, key, `${path}.${key}`)] as const)
      .filter(([, member]) => member !== undefined);
    this.count(Kind.object, members.length);
    for (const [key, member] of members) {
      this.string(Kind.string, key);
      this.write(member, `${path}.${key}`, depth);
    }
  }

  /** `value` written on its own, for sorting among the entries of a Map or the elements of a Set. */
  private apart(value: unknown, path: string, depth: number): Buffer {
    const chunks: Uint8Array[] = [];
    const writer = new Writer((chunk) => chunks.push(chunk));
    for (const ancestor of this.ancestors) writer.ancestors.add(ancestor);
    writer.write(value, path, depth);
    return Buffer.concat(chunks);
  }

  /** Entries whose order says nothing (a Map's, a Set's), in the order of their bytes. */
  private sorted(kind: number, entries: Buffer[]): void {
    this.count(kind, entries.length);
    for (const entry of entries.sort(Buffer.compare)) this.out(entry);
  }

  private kind(kind: number): void {
    this.out(Uint8Array.of(kind));
  }

  private count(kind: number, n: number): void {
    const head = Buffer.alloc(9);
    head[0] = kind;
    head.writeBigUInt64BE(BigInt(n), 1);
    this.out(head);
  }

  /** A string as its UTF-16 code units, so a lone surrogate is itself and not U+FFFD. */
  private string(kind: number, value: string): void {
    this.bytes(kind, Buffer.from(value, 'utf16le'));
  }

  private bytes(kind: number, bytes: Uint8Array): void {
    this.count(kind, bytes.byteLength);
    this.out(bytes);
  }

  private number(value: number): void {
    this.kind(Kind.number);
    // -0 is 0, as JSON writes it; every NaN is one.
    this.float(value === 0 ? 0 : value);
  }

  private float(value: number): void {
    const bytes = Buffer.alloc(8);
    bytes.writeDoubleBE(Number.isNaN(value) ? Number.NaN : value);
    this.out(bytes);
  }
}

/** A member read, or the refusal of one whose getter throws. */
function read(value: object, key: string, path: string): unknown {
  try {
    return Reflect.get(value, key);
  } catch (error) {
    throw new UndigestibleMessageError(path, `a member that cannot be read (${String(error)})`);
  }
}

/** An object literal's, or JSON.parse's, or one without a prototype (another realm's too). */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === null || proto === Object.prototype) return true;
  return (
    typeof proto === 'object' &&
    Object.getPrototypeOf(proto) === null &&
    Object.prototype.toString.call(value) === '[object Object]' &&
    Reflect.get(proto, 'constructor')?.name === 'Object'
  );
}

function describe(value: object): string {
  const name: unknown = Reflect.get(Object.getPrototypeOf(value) ?? {}, 'constructor')?.name;
  return `an object of class ${typeof name === 'string' && name !== '' ? name : Object.prototype.toString.call(value)}`;
}
