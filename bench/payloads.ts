// --- Tool arguments of a given size, shaped like a real call's ---
//
// The fingerprint's cost depends on the shape of the arguments as much as their size (keys
// to sort, strings to escape, numbers to print), so the large ones are what a tool taking
// an order would get: nested objects, arrays, strings, integers and decimals, not one long string.

/** The benchmark's small arguments: one field. */
export const SMALL_ARGUMENTS = { amount: 1 } as const;

export type LineItem = {
  sku: string;
  description: string;
  quantity: number;
  unitPrice: number;
  taxRate: number;
  tags: string[];
};

export type OrderArguments = {
  amount: number;
  currency: string;
  customer: { id: string; email: string; name: string };
  items: LineItem[];
};

/** Deterministic arguments whose JSON is about `bytes` long (never shorter). */
export function orderArgumentsOfSize(bytes: number): OrderArguments {
  const order: OrderArguments = {
    amount: 0,
    currency: 'EUR',
    customer: { id: 'cus_4f9a2c', email: 'ada@example.com', name: 'Ada Lovelace' },
    items: [],
  };
  while (JSON.stringify(order).length < bytes) {
    const n = order.items.length + 1;
    const item: LineItem = {
      sku: `SKU-${String(n).padStart(5, '0')}`,
      description: `Line item ${n}: analytical engine parts, “Übergröße” ${'★'.repeat(n % 3)}`,
      quantity: (n % 7) + 1,
      unitPrice: 100 + ((n * 7919) % 10_000),
      taxRate: 0.2,
      tags: ['hardware', n % 2 === 0 ? 'gift' : 'express'],
    };
    order.items.push(item);
    order.amount += item.quantity * item.unitPrice;
  }
  return order;
}

export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value));
}
