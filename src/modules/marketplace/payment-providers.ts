import type { Prisma } from '../../generated/prisma/client.js';

/**
 * How a purchase is paid: a small interface, so that a card processor can be added as one more
 * provider without touching the purchase flow (purchase.service.ts). A provider looks at the
 * server's price and says whether the purchase completes now, waits for the publisher to confirm
 * payment, or cannot be paid this way.
 */
export interface PaymentProvider {
  method: string;
  /** What the 422 listing the methods says of it. */
  description: string;
  charge(price: {
    amount: Prisma.Decimal;
    currency: string;
  }): { status: 'completed' | 'pending' } | { refused: string };
}

const free: PaymentProvider = {
  method: 'free',
  description: 'for templates priced 0',
  charge: ({ amount }) => (amount.isZero() ? { status: 'completed' } : { refused: 'is only for templates priced 0' }),
};

const invoice: PaymentProvider = {
  method: 'invoice',
  description: "pending until the publisher's admin confirms payment",
  charge: () => ({ status: 'pending' }),
};

export const paymentProviders: ReadonlyMap<string, PaymentProvider> = new Map(
  [free, invoice].map((p) => [p.method, p]),
);
