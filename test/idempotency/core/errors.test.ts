// The JSON-RPC errors of SEP-3182 (core/errors.ts), as they reach the wire and as a client reads
// them back: each `data.type` with its code (-32602 for what the caller sent, -32603 for what the
// server could not do), the key echoed only when there is one, the refused continuation and the
// unknown outcome in the forms a client tells apart from a final answer.

import { ProtocolErrorCode } from '@modelcontextprotocol/server';
import fc from 'fast-check';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  idempotencyError,
  idempotencyErrorCode,
  idempotencyErrorOf,
  isMissingClientCapability,
  isRefusedContinuation,
  JsonRpcError,
  MISSING_CLIENT_CAPABILITY,
  markedOutcomeUnknown,
  OUTCOME_META_KEY,
  outcomeUnknownOf,
  refusedContinuation,
} from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';

const TYPES = Object.values(IdempotencyErrorType);
/** The caller's own doing: what it sent cannot be served as sent. */
const CALLERS = new Set([
  'idempotency_key_invalid',
  'idempotency_key_in_progress',
  'idempotency_key_conflict',
]);
const type = fc.constantFrom(...TYPES);
const key = fc.string({ minLength: 1, maxLength: 40 });

/** What a thrown error becomes on the wire: the SDK copies `code`, `message` and `data`, as JSON. */
const onTheWire = (error: JsonRpcError) =>
  JSON.parse(JSON.stringify({ code: error.code, message: error.message, data: error.data })) as {
    code: number;
    message: string;
    data?: unknown;
  };

describe('an SEP-3182 error', () => {
  it("uses the SDKs' own codes for invalid params and internal error, and theirs for a missing capability", () => {
    expect(INVALID_PARAMS).toBe(ProtocolErrorCode.InvalidParams);
    expect(INTERNAL_ERROR).toBe(ProtocolErrorCode.InternalError);
    expect(MISSING_CLIENT_CAPABILITY).toBe(ProtocolErrorCode.MissingRequiredClientCapability);
  });

  it("spells the SEP's two types as the SEP does", () => {
    expect(IdempotencyErrorType.inProgress).toBe('idempotency_key_in_progress');
    expect(IdempotencyErrorType.conflict).toBe('idempotency_key_conflict');
  });

  it('reaches the wire as { code, message, data: { type, idempotencyKey } }, -32602 only for what the caller sent', () => {
    fc.assert(
      fc.property(type, fc.string(), key, (t, message, k) => {
        const wire = onTheWire(idempotencyError(t, message, k));
        const code = CALLERS.has(t) ? INVALID_PARAMS : INTERNAL_ERROR;
        expect(wire).toStrictEqual({ code, message, data: { type: t, idempotencyKey: k } });
        expect(idempotencyErrorCode(t)).toBe(code);
      }),
    );
  });

  it('carries no idempotencyKey member at all when there is no key to echo', () => {
    fc.assert(
      fc.property(type, fc.string(), (t, message) => {
        expect(onTheWire(idempotencyError(t, message)).data).toStrictEqual({ type: t });
      }),
    );
  });

  it('keeps its message exactly as written: no "MCP error" prefix, as McpError would add', () => {
    const error = idempotencyError(IdempotencyErrorType.conflict, 'use a new key', 'k');
    expect(error.message).toBe('use a new key');
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('JsonRpcError');
  });
});

describe('reading an error back on the client side', () => {
  it('gives back the code, the type and the key of every SEP-3182 error, after the wire', () => {
    fc.assert(
      fc.property(type, fc.option(key, { nil: undefined }), (t, k) => {
        const read = idempotencyErrorOf(onTheWire(idempotencyError(t, 'm', k)));
        expect(read).toStrictEqual(
          k === undefined
            ? { code: idempotencyErrorCode(t), type: t }
            : { code: idempotencyErrorCode(t), type: t, idempotencyKey: k },
        );
      }),
    );
  });

  it('is undefined for any other failure, whatever its shape', () => {
    const other = fc.oneof(
      fc.jsonValue(),
      fc.record({ code: fc.integer(), message: fc.string(), data: fc.record({ type: fc.string() }) }),
      fc.record({ code: fc.string(), data: fc.record({ type: type }) }),
      fc.record({ code: fc.integer(), data: fc.constant(null) }),
    );
    fc.assert(
      fc.property(other, (error) => {
        const t = Reflect.get(Object(Reflect.get(Object(error), 'data')), 'type');
        fc.pre(!(TYPES.includes(t) && typeof Reflect.get(Object(error), 'code') === 'number'));
        expect(idempotencyErrorOf(error)).toBeUndefined();
      }),
    );
  });

  it('drops a key that is not a string rather than pass it on', () => {
    expect(
      idempotencyErrorOf({ code: -32602, data: { type: 'idempotency_key_conflict', idempotencyKey: 7 } }),
    ).toStrictEqual({
      code: -32602,
      type: 'idempotency_key_conflict',
    });
  });
});

describe('a continuation refused before anything ran', () => {
  it('is answered as the v2 SDK answers a requestState it refuses: -32602, reason invalid_request_state, the key', () => {
    const wire = onTheWire(refusedContinuation('no opening round', 'k-1'));
    expect(wire).toStrictEqual({
      code: -32602,
      message: 'no opening round',
      data: { reason: 'invalid_request_state', idempotencyKey: 'k-1' },
    });
    expect(isRefusedContinuation(wire)).toBe(true);
  });

  it('is told apart from an invalid-params error with another reason, or the same reason under another code', () => {
    expect(isRefusedContinuation({ code: -32602, data: { reason: 'other' } })).toBe(false);
    expect(isRefusedContinuation({ code: -32602 })).toBe(false);
    expect(isRefusedContinuation({ code: -32603, data: { reason: 'invalid_request_state' } })).toBe(false);
  });

  it('is not an SEP-3182 error a client would act on', () => {
    expect(idempotencyErrorOf(onTheWire(refusedContinuation('m', 'k')))).toBeUndefined();
  });
});

describe('a missing client capability', () => {
  it('is -32021 and nothing else', () => {
    fc.assert(
      fc.property(fc.integer({ min: -32768, max: -32000 }), (code) => {
        expect(isMissingClientCapability({ code })).toBe(code === -32021);
      }),
    );
  });
});

describe('an answer whose outcome is unknown', () => {
  const result = { content: [{ type: 'text', text: 'provider timed out' }], isError: true };

  it('keeps a tool result as it was, with its own _meta, and adds the marker beside it', () => {
    const marked = markedOutcomeUnknown(
      { threw: false, result: { ...result, _meta: { trace: 't-1' } }, stored: { result } },
      'k-1',
    );
    expect(marked).toStrictEqual({
      ...result,
      _meta: {
        trace: 't-1',
        [OUTCOME_META_KEY]: { type: 'idempotency_outcome_unknown', idempotencyKey: 'k-1' },
      },
    });
    expect(outcomeUnknownOf(JSON.parse(JSON.stringify(marked)))).toStrictEqual({ idempotencyKey: 'k-1' });
  });

  it("turns a thrown error into idempotency_outcome_unknown, -32603, in the dispatch's own words", () => {
    const error = { code: -32000, message: 'gateway gave up' };
    const thrown = () => markedOutcomeUnknown({ threw: true, error, stored: { error } }, 'k-2');
    expect(thrown).toThrow(JsonRpcError);
    try {
      thrown();
    } catch (e) {
      const wire = onTheWire(e as JsonRpcError);
      expect(wire).toStrictEqual({
        code: -32603,
        message: 'gateway gave up',
        data: { type: 'idempotency_outcome_unknown', idempotencyKey: 'k-2' },
      });
      expect(outcomeUnknownOf(wire)).toStrictEqual({ idempotencyKey: 'k-2' });
    }
  });

  it('says to retry with the same key when the dispatch gave no words', () => {
    const error = { code: -32000, message: '' };
    expect(() => markedOutcomeUnknown({ threw: true, error, stored: { error } }, 'k-3')).toThrow(
      /retry it with the same idempotencyKey/,
    );
  });

  it('is told apart from every final answer: a plain result, another SEP-3182 error', () => {
    expect(outcomeUnknownOf(result)).toBeUndefined();
    expect(outcomeUnknownOf({ ...result, _meta: { [OUTCOME_META_KEY]: { type: 'other' } } })).toBeUndefined();
    fc.assert(
      fc.property(type, key, (t, k) => {
        const read = outcomeUnknownOf(onTheWire(idempotencyError(t, 'm', k)));
        expect(read).toStrictEqual(t === 'idempotency_outcome_unknown' ? { idempotencyKey: k } : undefined);
      }),
    );
  });
});
